"""The trace on real repositories' layouts (issue 31): fixture repositories under tests/data/layouts/, each file's
docstring saying what running it showed. One `mpdoctor check` over all of them (a copy) traces every case at once;
the layout reading itself is tested without TensorFlow."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from mpdoctor.config import ConfigError, load_config
from mpdoctor.project.layout import dotted_name, is_own_module, layout_of, not_model_code, package_roots

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
    # Test modules are written here, not kept under tests/data, where this suite's own pytest would collect them.
    (copy / "packages" / "tests").mkdir()
    (copy / "packages" / "tests" / "test_blocks.py").write_text(TEST_MODULE)
    (copy / "packages" / "conftest.py").write_text(CONFTEST)
    return copy


# Under pytest it passes; imported as model code it would build and train on its own fixture's data.
TEST_MODULE = """\
import keras
import numpy as np

from speech.models.encoder import build_model


def test_the_encoder_trains():
    model = build_model()
    model.compile("adam", "categorical_crossentropy")
    model.fit(np.zeros((4, 8)), np.zeros((4, 4)), epochs=1, verbose=0)
    assert keras.mixed_precision.global_policy().name == "mixed_float16"
"""
CONFTEST = """\
import keras
import pytest


@pytest.fixture(autouse=True)
def float32_policy():
    keras.mixed_precision.set_global_policy("float32")
"""


@dataclass
class Checked:
    findings: dict[str, list[dict]]  # {path relative to layouts/: its findings}
    traces: dict[str, dict]  # {path: its trace summary}
    stderr: str


@pytest.fixture(scope="module")
def checked(layouts) -> Checked:
    """Every fixture repository checked in one run."""
    result = run_check("--format", "json", "--verbose", ".", cwd=layouts)
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    found: dict[str, list[dict]] = {}
    for diagnostic in report["diagnostics"]:
        found.setdefault(diagnostic["path"], []).append(diagnostic)
    return Checked(found, {trace["path"]: trace for trace in report["traces"]}, result.stderr)


def codes(findings: list[dict]) -> list[tuple[str, str]]:
    return sorted((d["code"], d["severity"]) for d in findings)


# ------------------------------------------------------------------------------------------ missing modules


def test_a_third_party_module_not_installed_is_one_info_not_an_error(checked):
    """model.py imports wandb (declared, not installed here): one MP003 info at the import, no MP001."""
    [finding] = checked.findings["missing_dependency/model.py"]
    assert (finding["code"], finding["severity"]) == ("MP003", "info")
    assert finding["message"].startswith("not traced: `wandb` is not installed here; static findings only")
    assert finding["line"] == 4


def test_a_missing_module_of_the_project_itself_stays_an_error(checked):
    """trainer.py imports helpers.metrics, a module its own package lacks: a bug of the code, MP001 at error."""
    [finding] = checked.findings["missing_dependency/trainer.py"]
    assert (finding["code"], finding["severity"]) == ("MP001", "error")
    assert "No module named 'helpers.metrics'" in finding["message"]


def test_an_unbuilt_extension_of_the_project_is_one_info_not_an_error(checked):
    """detector.py imports helpers.overlap, which exists only as Cython source (helpers/overlap.pyx): the project is
    not built here (the environment's doing), so one MP003 info naming the extension; trainer.py's missing module,
    with no source at all, stays the error above."""
    [finding] = checked.findings["missing_dependency/detector.py"]
    assert (finding["code"], finding["severity"], finding["line"]) == ("MP003", "info", 4)
    assert finding["message"].startswith(
        "not traced: the project's extension `helpers.overlap` is not built here (only its source overlap.pyx)"
    )


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


# ------------------------------------------------------------------------------------------ layouts


@pytest.mark.parametrize(
    "path",
    [
        "src_layout/src/stepnet/model.py",  # relative import inside a src-layout package
        "src_layout/scripts/train.py",  # imports the src-layout package by name
        "src_layout/scripts/evaluate.py",  # argparse at import: the child's own arguments made it exit 2
        "packages/speech/models/encoder.py",  # `from ..layers.blocks import` two packages deep
        "packages/plugins/vision/backbone.py",  # relative import in a namespace package
    ],
)
def test_the_trace_imports_the_project_as_its_tooling_would(checked, path):
    """Each of these raised ImportError / ModuleNotFoundError as a top-level script (their docstrings say what
    running them showed); imported as `python -m` with the src root on sys.path, each builds its model."""
    assert checked.traces[path]["status"] == "ok", checked.findings.get(path)
    assert checked.traces[path]["models"]
    assert "MP001" not in {d["code"] for d in checked.findings.get(path, [])}


def test_package_roots_are_read_from_the_packaging(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools]\npackage-dir = {"" = "lib"}\n')
    (tmp_path / "lib").mkdir()
    assert package_roots(str(tmp_path)) == (str(tmp_path / "lib"),)
    cfg = tmp_path / "cfg"
    (cfg / "python").mkdir(parents=True)
    (cfg / "setup.cfg").write_text("[options]\npackage_dir =\n    =python\n")
    assert package_roots(str(cfg)) == (str(cfg / "python"),)
    py = tmp_path / "py"
    (py / "source" / "pkg").mkdir(parents=True)
    (py / "setup.py").write_text('setup(package_dir={"": "source"}, packages=find_packages("source"))\n')
    assert package_roots(str(py)) == (str(py / "source"),)
    assert package_roots(str(LAYOUTS / "src_layout")) == (str(LAYOUTS / "src_layout" / "src"),)


def test_dotted_names_follow_python_dash_m():
    packages = LAYOUTS / "packages"
    roots = (str(packages),)
    assert dotted_name(str(packages / "speech" / "models" / "encoder.py"), roots) == "speech.models.encoder"
    assert dotted_name(str(packages / "speech" / "__init__.py"), roots) == "speech"
    assert dotted_name(str(packages / "plugins" / "vision" / "backbone.py"), roots) == "plugins.vision.backbone"
    assert dotted_name(str(packages / "plugins" / "vision" / "stem.py"), roots) is None  # no relative import
    assert dotted_name(str(packages / "setup.py"), roots) is None  # top level: imported by its path


def test_a_package_tree_inside_the_project_is_imported_from_its_base(tmp_path):
    """tf-models' layout: official/legacy/train.py imports `official.utils` (its README puts the repository on
    PYTHONPATH); the package lies one level below the project root here."""
    (tmp_path / ".git").mkdir()
    models = tmp_path / "models"
    (models / "official" / "utils").mkdir(parents=True)
    (models / "official" / "legacy").mkdir()
    (models / "official" / "utils" / "flags.py").write_text("")
    train = models / "official" / "legacy" / "train.py"
    train.write_text("import os\nfrom official.utils import flags\nimport wandb\n")
    layout = layout_of(str(train))
    assert layout.search_path == (str(tmp_path), str(models))
    assert layout.module is None  # no __init__.py, no relative import: run as a script
    assert is_own_module("official.utils.missing", layout, str(train))
    assert not is_own_module("wandb", layout, str(train))


# ------------------------------------------------------------------------------------------ entries


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("packages/setup.py", "a packaging script"),  # under the trace, setup() parsed the child's argv and exited
        ("packages/conftest.py", "pytest configuration"),
        ("packages/docs/tutorial.py", "documentation"),  # a snippet: NameError on `train_ds` when run
        ("packages/tests/test_blocks.py", "a test module"),
    ],
)
def test_files_that_are_not_model_code_are_not_traced_and_verbose_says_so(checked, path, reason):
    assert path not in checked.traces
    assert "MP001" not in {d["code"] for d in checked.findings.get(path, [])}
    assert f"mpdoctor: trace: {path} not traced, {reason}: static findings only" in checked.stderr


def test_a_setup_module_that_configures_the_run_is_model_code(tmp_path):
    """NVIDIA's DeepLearningExamples keep `utils/setup.py` with `set_flags()` (XLA, AMP): no setuptools, traced."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "setup.py").write_text("import tensorflow as tf\n\ndef set_flags(params):\n    pass\n")
    (tmp_path / "setup.py").write_text("from setuptools import setup\n\nsetup(install_requires=['tensorflow'])\n")
    assert not_model_code(str(tmp_path / "utils" / "setup.py")) is None
    assert not_model_code(str(tmp_path / "setup.py")) == "a packaging script"
    (tmp_path / "tests").mkdir()
    assert not_model_code(str(tmp_path / "tests" / "model_test.py")) == "a test module"
    assert not_model_code(str(tmp_path / "tests" / "helpers.py")) is None  # a model helper the tests share


# ------------------------------------------------------------------------------------------ TF1 code on TF2


def test_tf1_graph_code_under_eager_tf2_is_cannot_trace_info(checked):
    """tf1_graph pins tensorflow-gpu 1.15; on the installed TF 2 compat_graph.py raised RuntimeError
    "tf.placeholder() is not compatible with eager execution." and graph_model.py's builder AttributeError on
    `tf.placeholder`; tf1_unpinned declares nothing but uses tf.Session (AttributeError)."""
    for path, needle in [
        ("tf1_graph/compat_graph.py", "runs eagerly, and `tf.placeholder()` is TensorFlow 1 graph code"),
        ("tf1_graph/graph_model.py", "lacks `tf.placeholder` (AttributeError)"),
        ("tf1_unpinned/session_model.py", "lacks `tf.Session` (AttributeError)"),
    ]:
        [finding] = [d for d in checked.findings[path] if "trace" in d["passes"]]
        assert (finding["code"], finding["severity"]) == ("MP003", "info"), finding
        assert finding["message"].startswith("cannot trace: the installed TensorFlow ") and needle in finding["message"]


def test_the_version_note_is_not_attached_to_a_plain_bug(checked):
    """typo.py raised NameError on a misspelt name: MP001, without "(observed on TensorFlow ...; target ...)"."""
    [finding] = checked.findings["tf1_graph/typo.py"]
    assert (finding["code"], finding["severity"]) == ("MP001", "error")
    assert finding["message"] == "building the model raised NameError: name 'num_clases' is not defined"


# ------------------------------------------------------------------------------------------ notebooks


def test_a_future_import_at_the_top_of_a_later_cell_is_traced_as_ipython_runs_it(checked):
    """Run cell by cell in IPython, future_cell.ipynb runs, and its model's softmax output is float16: the trace
    reaches it (MP401 confirmed by the trace at cell 4), no SyntaxError."""
    findings = checked.findings["notebook_future/future_cell.ipynb"]
    assert "MP001" not in {d["code"] for d in findings}, findings
    [mp401] = [d for d in findings if d["code"] == "MP401"]
    assert "trace" in mp401["passes"] and mp401["cell"] == 4


def test_a_compile_error_is_at_the_cell_its_message_names(checked):
    """IPython: cell 4 raises SyntaxError "'return' outside function" at its line 4."""
    [finding] = checked.findings["notebook_future/compile_error.ipynb"]
    assert finding["code"] == "MP001"
    assert (finding["cell"], finding["line"]) == (4, 4)
    assert finding["message"].endswith("'return' outside function (compile_error.ipynb, cell 4, line 4)")


def test_future_imports_are_hoisted_into_compiler_flags_on_the_same_lines():
    import __future__

    from mpdoctor.trace.child.main import hoist_future_imports

    text = "import os\nfrom __future__ import annotations; x = 1\nfrom __future__ import (\n    division,\n)\ny = 2\n"
    hoisted, flags = hoist_future_imports(text)
    assert hoisted == "import os\npass; x = 1\npass\n\n\ny = 2\n"
    assert flags == __future__.annotations.compiler_flag | __future__.division.compiler_flag
    compile(hoisted, "cells", "exec", flags=flags, dont_inherit=True)
    assert hoist_future_imports("def broken(:\n") == ("def broken(:\n", 0)
