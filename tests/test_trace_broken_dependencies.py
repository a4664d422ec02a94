"""A dependency that does not import with the packages installed here is the environment's, not the code's (issue
31): imgaug under NumPy 2 (`np.sctypes` is gone), tensorflow-hub 0.8 under TensorFlow 2.21, torch's native code
killing the trace child with SIGSEGV next to TensorFlow. One MP003 info ("not traced"), the exit code unaffected,
--strict-imports keeps the MP001 error; the project's own error, or TensorFlow's inside a call the project made,
stays MP001. The version note ("observed on TensorFlow X; target Y") only on failures the version can explain.

The tracebacks below are the shapes the real runs printed (keras-ocr's imgaug, ConvNeXt-TF's faulthandler dump),
with their paths moved into a temporary project and site-packages; the last tests run the trace child for real on
a fake site-packages directory whose packages fail the same ways."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mpdoctor.config import Config
from mpdoctor.facts.schema import ExceptionRecord, Facts
from mpdoctor.project import target
from mpdoctor.static.semantic import Settings
from mpdoctor.trace.broken_dependencies import fault_frames, installed_distribution, site_module
from mpdoctor.trace.checks import diagnose
from mpdoctor.trace.failures import version_may_explain
from mpdoctor.trace_context import TraceContext

ROOT = Path(__file__).resolve().parent.parent
IMGAUG_UNDER_NUMPY2 = "`np.sctypes` was removed in the NumPy 2.0 release. Access dtypes explicitly instead."


@pytest.fixture
def places(tmp_path) -> tuple[Path, Path]:
    """(a project with its model.py, a site-packages directory)."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "model.py").write_text("import keras\n\nimport imgaug\n")
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    return project, site


def frame(file: Path | str, line: int, function: str | None = "<module>") -> str:
    where = f", in {function}" if function else ""
    return f'  File "{file}", line {line}{where}\n    some_code()\n'


def traceback(*frames: str, error: str) -> str:
    return "Traceback (most recent call last):\n" + "".join(frames) + error + "\n"


def run_failed(project: Path, kind: str, message: str, trace: str, config: Config | None = None, ctx=None):
    """The parent's reading of a run of model.py that raised while importing the file."""
    exception = {"type": kind, "message": message, "phase": "import", "traceback": trace}
    exception["location"] = {"file": str(project / "model.py"), "line": 3}
    facts = Facts.from_json({"status": "exception", "exception": exception})
    model = str(project / "model.py")
    [finding] = diagnose(facts, None, "", ctx or TraceContext(model, "model.py", "", None), config or Config())
    return finding


def imgaug_traceback(project: Path, site: Path) -> str:
    """keras-ocr's scripts importing imgaug 0.4 under NumPy 2 (numpy's module __getattr__ raises)."""
    return traceback(
        frame("/usr/lib/python3.11/importlib/__init__.py", 126, "import_module"),
        frame("<frozen importlib._bootstrap>", 1204, "_gcd_import"),
        frame(project / "model.py", 3),
        frame(site / "imgaug" / "__init__.py", 7),
        frame(site / "imgaug" / "imgaug.py", 45),
        frame(site / "numpy" / "__init__.py", 778, "__getattr__"),
        error=f"AttributeError: {IMGAUG_UNDER_NUMPY2}",
    )


def test_a_dependency_failing_its_own_import_is_one_info(places):
    project, site = places
    finding = run_failed(project, "AttributeError", IMGAUG_UNDER_NUMPY2, imgaug_traceback(project, site))
    assert (finding.code, finding.severity.value, finding.location.line) == ("MP003", "info", 3)
    assert finding.message.startswith(
        "not traced: `imgaug` does not import with the packages installed here (AttributeError raised in numpy"
    )
    assert IMGAUG_UNDER_NUMPY2 in finding.message and "static findings only" in finding.message


def test_a_notebook_importing_the_projects_package_that_imports_a_broken_dependency(places):
    """keras-ocr's layout: the notebook under examples/ imports the project's package, whose __init__ imports imgaug;
    the project's last frame is the package's import of imgaug (the project root holds both)."""
    project, site = places
    (project / "examples").mkdir()
    notebook = project / "examples" / "demo.ipynb"
    trace = traceback(
        frame(notebook, 2),
        frame(project / "keras_ocr" / "__init__.py", 1),
        frame(site / "imgaug" / "__init__.py", 7),
        frame(site / "numpy" / "__init__.py", 778, "__getattr__"),
        error=f"AttributeError: {IMGAUG_UNDER_NUMPY2}",
    )
    exception = {"type": "AttributeError", "message": IMGAUG_UNDER_NUMPY2, "phase": "import", "traceback": trace}
    facts = Facts.from_json({"status": "exception", "exception": exception})
    ctx = TraceContext(str(notebook), "examples/demo.ipynb", "", None)
    [finding] = diagnose(facts, None, "", ctx, Config())
    assert (finding.code, finding.severity.value) == ("MP003", "info")
    assert finding.message.startswith("not traced: `imgaug` does not import")


def test_strict_imports_keeps_a_broken_dependency_an_error(places):
    project, site = places
    trace = imgaug_traceback(project, site)
    finding = run_failed(project, "AttributeError", IMGAUG_UNDER_NUMPY2, trace, Config(strict_imports=True))
    assert (finding.code, finding.severity.value) == ("MP001", "error")


def test_a_failure_in_the_projects_own_module_stays_an_error(places):
    """The same AttributeError raised by the project's helpers.py (its own `np.sctypes`): the code's to fix."""
    project, site = places
    trace = traceback(
        frame(project / "model.py", 3),
        frame(project / "helpers.py", 2),
        frame(site / "numpy" / "__init__.py", 778, "__getattr__"),
        error=f"AttributeError: {IMGAUG_UNDER_NUMPY2}",
    )
    finding = run_failed(project, "AttributeError", IMGAUG_UNDER_NUMPY2, trace)
    assert (finding.code, finding.severity.value) == ("MP001", "error")


def test_tensorflows_error_in_a_call_the_project_made_stays_an_error(places):
    """The project's module-level `Dense(4, kernel_size=3)`: raised in Keras, but by the project's call."""
    project, site = places
    message = "Unrecognized keyword arguments passed to Dense: {'kernel_size': 3}"
    trace = traceback(
        frame(project / "model.py", 3),
        frame(site / "keras" / "src" / "layers" / "core" / "dense.py", 89, "__init__"),
        frame(site / "keras" / "src" / "layers" / "layer.py", 291, "__init__"),
        error=f"ValueError: {message}",
    )
    assert (run_failed(project, "ValueError", message, trace).code) == "MP001"


def test_a_dependency_that_does_not_compile_here_is_one_info(places):
    """A Python 2 dependency: the SyntaxError's location is in the dependency, reached from the import statement."""
    project, site = places
    trace = traceback(
        frame(project / "model.py", 3),
        frame("<frozen importlib._bootstrap_external>", 936, "exec_module"),
        frame(site / "py2dep" / "__init__.py", 3, None),
        error="SyntaxError: Missing parentheses in call to 'print'. Did you mean print(...)?",
    )
    finding = run_failed(project, "SyntaxError", "Missing parentheses in call to 'print'", trace)
    assert (finding.code, finding.severity.value) == ("MP003", "info")
    assert finding.message.startswith("not traced: `py2dep` does not import with the packages installed here")


def test_a_module_outside_site_packages_is_not_taken_for_a_dependency(places, tmp_path):
    """A directory of the user's PYTHONPATH, outside the project: nothing says it is not the user's code."""
    project, _ = places
    trace = traceback(
        frame(project / "model.py", 3),
        frame(tmp_path / "shared" / "common" / "__init__.py", 2),
        error="AttributeError: module 'common' has no attribute 'x'",
    )
    assert run_failed(project, "AttributeError", "module 'common' has no attribute 'x'", trace).code == "MP001"


# ------------------------------------------------------------------------------------------ native crashes

# faulthandler's dump (Python 3.11), most recent call first, trimmed of its importlib frames' repetitions.
CRASH_DUMP = """\
Fatal Python error: Segmentation fault

Stack (most recent call first):
  File "{site}/torch/__init__.py", line 237 in <module>
  File "<frozen importlib._bootstrap>", line 241 in _call_with_frames_removed
  File "<frozen importlib._bootstrap_external>", line 940 in exec_module
  File "{site}/timm/__init__.py", line 2 in <module>
  File "<frozen importlib._bootstrap>", line 1176 in _find_and_load
  File "{project}/model.py", line 3 in <module>
  File "<frozen importlib._bootstrap_external>", line 940 in exec_module
  File "/opt/mpdoctor/mpdoctor/trace/child/main.py", line 236 in _import_user_file
  File "<frozen runpy>", line 198 in _run_module_as_main

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
"""
KILLED = "the trace child was killed by SIGSEGV"


def crashed(project: Path, dump: str, config: Config | None = None):
    model = str(project / "model.py")
    [finding] = diagnose(
        None, KILLED, "", TraceContext(model, "model.py", "", None), config or Config(), crash_stack=dump
    )
    return finding


def test_a_native_crash_while_a_dependency_imports_is_one_info_naming_it(places):
    project, site = places
    finding = crashed(project, CRASH_DUMP.format(site=site, project=project))
    assert (finding.code, finding.severity.value, finding.location.line) == ("MP003", "info", 3)
    assert finding.message.startswith(
        f"not traced: {KILLED} while importing `torch` (imported through `timm`), a native library incompatible"
    )


def test_a_native_crash_stays_a_trace_failure_when_strict_or_in_a_call_or_unknown(places):
    project, site = places
    dump = CRASH_DUMP.format(site=site, project=project)
    assert crashed(project, dump, Config(strict_imports=True)).code == "MP001"
    in_a_call = dump.replace(f'  File "{site}/torch/__init__.py", line 237 in <module>', "").replace(
        f'"{site}/timm/__init__.py", line 2 in <module>', f'"{site}/torch/functional.py", line 2 in zeros'
    )
    assert crashed(project, in_a_call).code == "MP001"  # the project's call crashed: its own doing, as far as known
    assert crashed(project, "").code == "MP001"  # no dump (the child disabled faulthandler, or it was SIGKILL)
    assert (crashed(project, "").severity.value, crashed(project, "").message) == (
        "error",
        f"trace pass failed: {KILLED}; static findings are still reported",
    )


# ConvNeXt-TF's convert.py (`import torch` next to TensorFlow): a compiled extension of triton crashed while loading;
# the stack is deeper than faulthandler's 100 frames, so the project's frames are cut ("...").
TRUNCATED_DUMP = """\
Fatal Python error: Segmentation fault

Stack (most recent call first):
  File "<frozen importlib._bootstrap>", line 241 in _call_with_frames_removed
  File "<frozen importlib._bootstrap_external>", line 1233 in create_module
  File "<frozen importlib._bootstrap>", line 573 in module_from_spec
  File "{site}/triton/knobs.py", line 15 in <module>
  File "<frozen importlib._bootstrap>", line 1176 in _find_and_load
  File "{site}/triton/__init__.py", line 8 in <module>
  File "<frozen importlib._bootstrap>", line 1176 in _find_and_load
  File "{site}/torch/utils/_triton.py", line 39 in has_triton_package
  File "{site}/torch/_dynamo/utils.py", line 2932 in <module>
  ...

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
"""


def test_a_crash_loading_a_compiled_extension_is_the_environments_even_without_the_projects_frames(places):
    project, site = places
    (project / "model.py").write_text("import numpy\nimport torch\n")
    model = str(project / "model.py")
    text = (project / "model.py").read_text()
    ctx = TraceContext(model, "model.py", text, ast.parse(text))
    [finding] = diagnose(None, KILLED, "", ctx, Config(), crash_stack=TRUNCATED_DUMP.format(site=site))
    assert (finding.code, finding.severity.value, finding.location.line) == ("MP003", "info", 2)  # `import torch`
    assert f"{KILLED} while importing `triton` (imported through `torch`)" in finding.message
    # The same cut stack ending in a Python function of the library (no extension loading): nothing says whose.
    in_python = (
        TRUNCATED_DUMP.format(site=site)
        .replace("create_module", "_find_spec")
        .replace("_call_with_frames_removed", "find_spec")
    )
    assert crashed(project, in_python).code == "MP001"


def test_the_fault_dump_is_read_outermost_first():
    frames = fault_frames(CRASH_DUMP.format(site="/s/site-packages", project="/p"))
    assert [f.function for f in frames][-1] == "<module>" and frames[-1].file.endswith("torch/__init__.py")
    assert frames[0].line == 198


# ------------------------------------------------------------------------------------------ naming packages


def test_site_module_names_the_installed_package_and_a_namespace_packages_part(tmp_path):
    site = tmp_path / "site-packages"
    (site / "google" / "protobuf").mkdir(parents=True)
    (site / "numpy").mkdir()
    (site / "numpy" / "__init__.py").write_text("")
    assert site_module(str(site / "google" / "protobuf" / "descriptor.py")) == "google.protobuf"
    assert site_module(str(site / "numpy" / "__init__.py")) == "numpy"
    assert site_module(str(site / "six.py")) == "six"
    assert site_module(str(tmp_path / "project" / "numpy" / "x.py")) is None
    assert site_module("<frozen importlib._bootstrap>") is None


def test_installed_distribution_names_the_distribution_and_its_version():
    import importlib.metadata

    assert installed_distribution("_pytest") == f"pytest {importlib.metadata.version('pytest')}"
    assert installed_distribution("no_such_module_here") is None


# ------------------------------------------------------------------------------------------ the version note


def outside_target(project: Path) -> TraceContext:
    """model.py of a project pinned to TensorFlow 2.5, traced on the installed (newer) TensorFlow."""
    (project / "requirements.txt").write_text("tensorflow==2.5.0\n")
    target.new_run()
    text = (project / "model.py").read_text()
    return TraceContext(str(project / "model.py"), "model.py", text, ast.parse(text), Settings())


def test_the_version_note_only_on_failures_the_version_can_explain(places):
    project, site = places
    ctx = outside_target(project)
    if not ctx.observed_note:
        pytest.skip("no TensorFlow installed: no run to observe")
    own = traceback(frame(project / "model.py", 3), error="AttributeError: 'Trainer' object has no attribute 'x'")
    keras_frame = frame(site / "keras" / "src" / "ops" / "core.py", 40, "cast")
    by_keras = traceback(frame(project / "model.py", 3), keras_frame, error="TypeError: bad dtype")
    cases = [
        ("NameError", "name 'num_clases' is not defined", own, False),
        ("AttributeError", "'Trainer' object has no attribute 'x'", own, False),  # the project's own object
        ("KeyError", "'labels'", own, False),
        ("TypeError", "bad dtype", by_keras, True),  # raised in Keras' code
        ("ValueError", "tf.function only supports singleton tf.Variables", own, True),  # names TF's API
    ]
    for kind, message, trace, expected in cases:
        assert version_may_explain(ExceptionRecord(kind, message, "import", None, None, trace)) is expected
        finding = run_failed(project, kind, message, trace, ctx=ctx)
        assert finding.code == "MP001" and (ctx.observed_note in finding.message) is expected, finding.message


def test_a_killed_child_carries_no_version_note(places):
    project, _ = places
    ctx = outside_target(project)
    [finding] = diagnose(None, KILLED, "", ctx, Config())
    assert finding.message == f"trace pass failed: {KILLED}; static findings are still reported"


def test_tf_keras_module_path_is_named_as_keras_in_mp003():
    from mpdoctor.rules.mp003_target_mismatch import missing_api

    message = "module 'tf_keras.api._v2.keras' has no attribute '__version__'"
    assert missing_api(ExceptionRecord("AttributeError", message, "import")) == "keras.__version__"


# ------------------------------------------------------------------------------------------ traced for real

FAKE_NUMPY = """\
def __getattr__(name):
    if name == "sctypes":
        raise AttributeError("`np.sctypes` was removed in the NumPy 2.0 release. Access dtypes explicitly instead.")
    raise AttributeError(name)
"""
MODEL = """\
import keras

import {module}


def build_model():
    inputs = keras.Input((8,))
    return keras.Model(inputs, keras.layers.Dense(4)(inputs))
"""


@pytest.fixture(scope="module")
def installed(tensorflow, tmp_path_factory) -> tuple[Path, Path]:
    """A project whose files import fake installed packages: olddep (fails on its own import under `fakenp`, as
    imgaug under NumPy 2), viadep (imports crashlib, whose import crashes the process with SIGSEGV), and the
    project's own helpers.py (the same AttributeError in the project's code)."""
    base = tmp_path_factory.mktemp("broken")
    site = base / "lib" / "site-packages"
    files = {
        "fakenp/__init__.py": FAKE_NUMPY,
        "olddep/__init__.py": "from olddep.core import *\n",
        "olddep/core.py": 'import fakenp\n\nFLOAT_TYPES = set(fakenp.sctypes["float"])\n',
        "crashlib/__init__.py": "import ctypes\n\nctypes.string_at(0)  # a native crash on import\n",
        "viadep/__init__.py": "import crashlib\n",
        "abortlib/__init__.py": "import os\n\nos.abort()  # a native library's failed assertion: SIGABRT\n",
    }
    for name, text in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    project = base / "project"
    (project / ".git").mkdir(parents=True)
    (project / "helpers.py").write_text(files["olddep/core.py"])
    for name, module in (
        ("model.py", "olddep"),
        ("own.py", "helpers"),
        ("convert.py", "viadep"),
        ("abort.py", "abortlib"),
    ):
        (project / name).write_text(MODEL.format(module=module))
    return project, site


def check(installed: tuple[Path, Path], *args: str) -> subprocess.CompletedProcess:
    project, site = installed
    return subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--no-cache", "--trace", *args],
        cwd=project,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(site)])),
        timeout=600,
        check=False,
    )


def test_traced_a_broken_dependency_and_a_native_crash_are_infos_and_exit_0(installed):
    result = check(installed, "model.py", "convert.py", "abort.py")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if " MP" in line)
    assert len(lines) == 3, result.stdout
    assert lines[0].startswith("abort.py:3:1: MP003 not traced: the trace child was killed by SIGABRT while ")
    assert "importing `abortlib`, a native library" in lines[0]
    assert lines[1].startswith("convert.py:3:1: MP003 not traced: the trace child was killed by SIGSEGV while ")
    assert "importing `crashlib` (imported through `viadep`)" in lines[1]
    assert lines[2].startswith(
        "model.py:3:1: MP003 not traced: `olddep` does not import with the packages installed here (AttributeError "
        "raised in fakenp: `np.sctypes` was removed"
    )


def test_traced_the_projects_own_error_and_strict_imports_are_mp001(installed):
    own = check(installed, "own.py")
    assert own.returncode == 1 and "own.py:3:1: MP001 importing the file raised AttributeError" in own.stdout
    strict = check(installed, "--strict-imports", "model.py", "convert.py")
    assert strict.returncode == 1
    assert "model.py:3:1: MP001 importing the file raised AttributeError" in strict.stdout
    assert "convert.py:1:1: MP001 trace pass failed: the trace child was killed by SIGSEGV" in strict.stdout


KERAS_VERSION_NOTEBOOK_CODE = textwrap.dedent(
    """\
    import tensorflow as tf
    from tensorflow import keras

    print(keras.__version__)
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, dtype="float32")])
    """
)


def test_tf_keras_for_an_old_target_lacking_an_api_is_mp003_naming_it(installed):
    """keras-unet-collection's notebook (TF 2.5 pinned) prints `keras.__version__`; the trace runs tf.keras as tf_keras
    for that Keras 2 target, whose `tf_keras.api._v2.keras` has no `__version__` (TF 2.5's tf.keras has)."""
    project, _ = installed
    old = project / "old_target"
    (old / ".git").mkdir(parents=True)
    (old / "requirements.txt").write_text("tensorflow==2.5.0\n")
    (old / "model.py").write_text(KERAS_VERSION_NOTEBOOK_CODE)
    result = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--no-cache", "--trace", "model.py"],
        cwd=old,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [line] = [line for line in result.stdout.splitlines() if " MP003 " in line]
    assert line.startswith("model.py:4:1: MP003 cannot trace: the installed TensorFlow "), line
    assert "lacks `keras.__version__` (AttributeError on tf_keras), and this file targets TensorFlow ==2.5.0" in line
    assert "MP001" not in result.stdout
