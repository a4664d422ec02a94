"""The pre-commit hooks for real: `pre-commit try-repo` on this repository installs mpdoctor into a fresh virtualenv
(pip, without TensorFlow) and runs the `mpdoctor` hook on a temporary git repository; both hooks are also run as the
README's `repo: local` hooks print them, with this checkout as the environment's `mpdoctor` (the trace hook with this
environment's TensorFlow).

try-repo takes this repository's tracked files with their uncommitted changes (`git add -u`), not untracked ones:
commit or `git add` new modules before running these tests. Slow (a virtualenv and a pip install per try-repo run):
deselect with `-m "not slow"`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import CLEAN, SOFTMAX_HEAD
from test_notebook import softmax_notebook

REPO = Path(__file__).resolve().parents[1]


def _is_git_repo(path: Path) -> bool:
    result = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path, capture_output=True, text=True)
    return result.returncode == 0 and Path(result.stdout.strip()).resolve() == path


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("pre_commit") is None, reason="pre-commit not installed (dev extra)"),
    pytest.mark.skipif(not _is_git_repo(REPO), reason="try-repo needs this project as a git repository"),
]

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def _env(tmp_path: Path) -> dict:
    # No PYTHONPATH: the hook must run the copy pip installed into its virtualenv, not this checkout.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NO_COLOR", "FORCE_COLOR")}
    env.update(GIT_IDENTITY, PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"), PRE_COMMIT_COLOR="never")
    return env


def _git_repo(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=directory, check=True)
    for name, content in files.items():
        (directory / name).write_text(content)
    subprocess.run(["git", "add", "-A"], cwd=directory, check=True)
    return directory


def _pre_commit(tmp_path: Path, cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=_env(tmp_path) | (env or {}),
        timeout=900,
    )


def test_static_hook_fails_on_a_float16_softmax_head_in_a_file_and_a_notebook(tmp_path):
    repo = _git_repo(
        tmp_path / "project", {"model.py": SOFTMAX_HEAD, "demo.ipynb": json.dumps(softmax_notebook(), indent=1)}
    )
    result = _pre_commit(tmp_path, repo, "try-repo", str(REPO), "mpdoctor", "--all-files")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "mpdoctor (static)" in output and "Failed" in output
    assert "model.py:7:5: MP401" in output
    assert "demo.ipynb:cell 3:line 5:col 5: MP401" in output


def test_static_hook_passes_on_clean_code(tmp_path):
    repo = _git_repo(tmp_path / "project", {"clean.py": CLEAN, "notes.txt": "not python\n"})
    result = _pre_commit(tmp_path, repo, "try-repo", str(REPO), "mpdoctor", "--all-files")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "mpdoctor (static)" in output and "Passed" in output


def test_a_staged_file_named_like_an_option_is_checked_as_a_file(tmp_path):
    """Issue 32, 03: pre-commit appends the staged names to the hook's entry and args; the hooks' args end with `--`,
    so `-osetup.py` is a file to check, never `-o setup.py` (which wrote the report over setup.py)."""
    setup = 'from setuptools import setup\nsetup(name="precious")\n'
    repo = _git_repo(tmp_path / "project", {"clean.py": CLEAN, "-osetup.py": SOFTMAX_HEAD, "setup.py": setup})
    result = _pre_commit(tmp_path, repo, "try-repo", str(REPO), "mpdoctor", "--all-files")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "-osetup.py:7:5: MP401" in output
    assert (repo / "setup.py").read_text() == setup


def readme_local_snippet() -> str:
    """The README's `repo: local` configuration (the pre-commit section's second yaml block), verbatim."""
    section = README.read_text().split("\n## pre-commit\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)[1]


@pytest.fixture
def mpdoctor_on_path(tmp_path) -> dict:
    """The environment of a pre-commit run whose `mpdoctor` command runs this checkout (the README's local hooks use
    the command of the environment pre-commit runs in)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    command = bin_dir / "mpdoctor"
    command.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m mpdoctor "$@"\n')
    command.chmod(0o755)
    return {"PATH": os.pathsep.join([str(bin_dir), os.environ["PATH"]])}


def test_the_readme_local_hooks_as_printed_static(tmp_path, mpdoctor_on_path):
    setup = 'from setuptools import setup\nsetup(name="precious")\n'
    repo = _git_repo(
        tmp_path / "project",
        {
            "model.py": SOFTMAX_HEAD,
            "clean.py": CLEAN,
            "-osetup.py": SOFTMAX_HEAD,
            "setup.py": setup,
            ".pre-commit-config.yaml": readme_local_snippet(),
        },
    )
    result = _pre_commit(tmp_path, repo, "run", "--all-files", env=mpdoctor_on_path)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "mpdoctor (static)" in output and "Failed" in output and "mpdoctor (trace)" not in output  # manual stage
    assert "model.py:7:5: MP401" in output and "-osetup.py:7:5: MP401" in output and "clean.py" not in output
    assert (repo / "setup.py").read_text() == setup


def test_the_readme_local_hooks_as_printed_trace(tmp_path, tensorflow, mpdoctor_on_path):
    repo = _git_repo(
        tmp_path / "project", {"model.py": SOFTMAX_HEAD, ".pre-commit-config.yaml": readme_local_snippet()}
    )
    run = ("run", "--hook-stage", "manual", "mpdoctor-trace", "--all-files")
    result = _pre_commit(tmp_path, repo, *run, env=mpdoctor_on_path)
    assert result.returncode == 1, result.stdout + result.stderr
    # The trace's own wording: the model was built and run, its output observed in float16.
    assert re.search(
        r"model\.py:7:5: MP401 \[\*\] output `\w+` of model .* computes softmax in float16", result.stdout
    ), result.stdout


README = REPO / "README.md"
PUBLIC_URL = "https://github.com/mpdoctor/mpdoctor"


def readme_snippet() -> str:
    """The `.pre-commit-config.yaml` the README's "pre-commit" section prints (its first yaml block), verbatim."""
    section = README.read_text().split("\n## pre-commit\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```yaml\n(.*?)```", section, re.DOTALL).group(1)


def test_the_readme_snippet_names_the_release_tag_of_this_version():
    import yaml

    from mpdoctor import __version__

    [repo] = yaml.safe_load(readme_snippet())["repos"]
    assert repo["repo"] == PUBLIC_URL
    assert repo["rev"] == f"v{__version__}"  # releases are tagged with the version (CHANGELOG.md says so)
    assert [hook["id"] for hook in repo["hooks"]] == ["mpdoctor", "mpdoctor-trace"]


def test_the_readme_snippet_works_as_written(tmp_path):
    """The README's snippet, with only the URL replaced by a local clone of this repository (no network): the
    release tag it names is fetched and the static hook fails on a float16 softmax head. The tag is created in the
    clone when this repository does not have it yet (releases are tagged when they are cut)."""
    from mpdoctor import __version__

    clone = tmp_path / "mpdoctor-clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, env=_env(tmp_path))
    tag = f"v{__version__}"
    tags = subprocess.run(["git", "tag", "--list", tag], cwd=clone, capture_output=True, text=True).stdout
    if not tags.strip():
        subprocess.run(["git", "tag", tag], cwd=clone, check=True, env=_env(tmp_path))
    snippet = readme_snippet()
    assert snippet.count(PUBLIC_URL) == 1
    project = _git_repo(
        tmp_path / "project",
        {
            "model.py": SOFTMAX_HEAD,
            "clean.py": CLEAN,
            ".pre-commit-config.yaml": snippet.replace(PUBLIC_URL, str(clone)),
        },
    )
    result = _pre_commit(tmp_path, project, "run", "--all-files")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "mpdoctor (static)" in output and "Failed" in output
    assert "model.py:7:5: MP401" in output and "clean.py" not in output
    assert "mpdoctor (trace)" not in output  # manual stage: not run (nor installed) on commit


def test_manifest_declares_both_hooks():
    import yaml

    hooks = {h["id"]: h for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"mpdoctor", "mpdoctor-trace"}
    for hook in hooks.values():
        assert hook["language"] == "python" and hook["types_or"] == ["python", "jupyter"]
        assert hook["require_serial"] is True
    assert "--no-trace" in hooks["mpdoctor"]["entry"] and "--trace" in hooks["mpdoctor-trace"]["entry"].split()
    # The staged file names come after `--` (issue 32, 03); the README's local hooks end their entry with it.
    assert hooks["mpdoctor"]["args"] == ["--"] and hooks["mpdoctor-trace"]["args"] == ["--"]
    local = {h["id"]: h for h in yaml.safe_load(readme_local_snippet())["repos"][0]["hooks"]}
    assert set(local) == {"mpdoctor", "mpdoctor-trace"}
    for hook in local.values():
        assert hook["entry"] == hooks[hook["id"]]["entry"] + " --"
        assert hook["types_or"] == hooks[hook["id"]]["types_or"] and hook["require_serial"] is True
    assert hooks["mpdoctor-trace"]["stages"] == ["manual"]
