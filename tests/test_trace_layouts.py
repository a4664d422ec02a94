"""The trace on real repositories' layouts (issue 31): fixture repositories under tests/data/layouts/, each file's
docstring saying what running it showed. One `mpdoctor check` over all of them (a copy) traces every case at once;
the layout reading itself is tested without TensorFlow."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mpdoctor.config import ConfigError, load_config
from mpdoctor.project.layout import is_own_module, layout_of

ROOT = Path(__file__).resolve().parent.parent
LAYOUTS = ROOT / "tests" / "data" / "layouts"


def run_check(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--no-cache", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=900,
        check=False,
    )


@pytest.fixture(scope="module")
def layouts(tensorflow, tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("layouts") / "layouts"
    shutil.copytree(LAYOUTS, copy)
    return copy


@pytest.fixture(scope="module")
def checked(layouts) -> dict[str, list[dict]]:
    """Every fixture repository checked in one run: {path relative to layouts/: its findings}."""
    result = run_check("--format", "json", "--verbose", ".", cwd=layouts)
    assert result.returncode in (0, 1), result.stderr
    found: dict[str, list[dict]] = {}
    for diagnostic in json.loads(result.stdout)["diagnostics"]:
        found.setdefault(diagnostic["path"], []).append(diagnostic)
    return found


def codes(findings: list[dict]) -> list[tuple[str, str]]:
    return sorted((d["code"], d["severity"]) for d in findings)


# ------------------------------------------------------------------------------------------ missing modules


def test_a_third_party_module_not_installed_is_one_info_not_an_error(checked):
    """model.py imports wandb (declared, not installed here): one MP003 info at the import, no MP001."""
    [finding] = checked["missing_dependency/model.py"]
    assert (finding["code"], finding["severity"]) == ("MP003", "info")
    assert finding["message"].startswith("not traced: `wandb` is not installed here; static findings only")
    assert finding["line"] == 4


def test_a_missing_module_of_the_project_itself_stays_an_error(checked):
    """trainer.py imports helpers.metrics, a module its own package lacks: a bug of the code, MP001 at error."""
    [finding] = checked["missing_dependency/trainer.py"]
    assert (finding["code"], finding["severity"]) == ("MP001", "error")
    assert "No module named 'helpers.metrics'" in finding["message"]


def test_strict_imports_makes_a_missing_module_an_error_and_fails_the_run(layouts):
    project = layouts / "missing_dependency"
    relaxed = run_check("model.py", cwd=project)
    assert relaxed.returncode == 0, relaxed.stdout + relaxed.stderr  # an info does not fail the gate
    strict = run_check("--strict-imports", "model.py", cwd=project)
    assert strict.returncode == 1
    assert "MP001 importing the file raised ModuleNotFoundError: No module named 'wandb'" in strict.stdout


def test_strict_imports_is_a_configuration_key(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.mpdoctor]\nstrict-imports = true\n")
    assert load_config(tmp_path).strict_imports is True
    (tmp_path / "pyproject.toml").write_text('[tool.mpdoctor]\nstrict-imports = "yes"\n')
    with pytest.raises(ConfigError, match="strict-imports: expected true or false"):
        load_config(tmp_path)


def test_own_modules_are_told_from_third_party_ones():
    project = LAYOUTS / "missing_dependency"
    layout = layout_of(str(project / "model.py"))
    assert layout.root == str(project)
    assert is_own_module("helpers.metrics", layout, str(project / "trainer.py"))
    assert not is_own_module("wandb", layout, str(project / "model.py"))
