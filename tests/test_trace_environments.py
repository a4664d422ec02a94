"""Tracing in the user's own environment: which adapter each Keras package gets (by what the package is, not its
name), and mpdoctor's own failures in the child reported as such: an info finding "mpdoctor cannot trace on
TensorFlow X / Keras Y", the static findings kept, the failure and the environment in the JSON trace. The
failures are forced in the real child through a sitecustomize module that breaks an adapter or a hook.

The TensorFlow versions themselves are covered by the version matrix (ci/matrix.py, README "Supported
environments"); these tests run on the installed one.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from mpdoctor.config import Config
from mpdoctor.diagnostics import Diagnostic, Location, Report, Severity
from mpdoctor.engine import finish
from mpdoctor.facts import keras_semantics
from mpdoctor.facts.schema import Facts, TraceSummary
from mpdoctor.report import write_report
from mpdoctor.trace.checks import diagnose, verdicts
from mpdoctor.trace.child import hooks, keras_adapter
from mpdoctor.trace.child.adapters import UnsupportedKeras, adapter_for, keras2, keras3, tf_keras
from mpdoctor.trace_context import TraceContext

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------ which Keras, no TF


def _classes(*modules: str) -> object:
    """An object whose class hierarchy lives in these modules (most derived first)."""
    base = object
    for module in reversed(modules):
        base = type("Layer", (base,), {"__module__": module})
    return base()


@pytest.mark.parametrize(
    "modules,flavour",
    [
        (("keras.src.layers.core.dense", "keras.src.layers.layer"), keras_semantics.KERAS3),
        (("keras.src.layers.core.dense", "keras.src.engine.base_layer"), keras_semantics.KERAS2),  # TF 2.13-2.15
        (("tf_keras.src.layers.core.dense", "tf_keras.src.engine.base_layer"), keras_semantics.TF_KERAS),
        (("tensorflow_hub.keras_layer", "keras.src.engine.base_layer"), keras_semantics.KERAS2),  # hub on TF 2.15
        (("tensorflow_hub.keras_layer", "tf_keras.src.engine.base_layer"), keras_semantics.TF_KERAS),
        (("my_model",), None),
    ],
)
def test_a_keras_object_is_told_by_its_hierarchy_not_its_package_name(modules, flavour):
    assert keras_semantics.flavour_of(_classes(*modules)) == flavour


@pytest.mark.parametrize(
    "tensorflow,legacy,installed,keras,package,major",
    [
        ((2, 13), False, False, "2.13.1", "keras", 2),
        ((2, 13), True, False, "2.13.1", "keras", 2),  # TF 2.13 ignores TF_USE_LEGACY_KERAS
        ((2, 15), False, True, "2.15.0", "keras", 2),
        ((2, 15), True, True, "2.15.0", "tf_keras", 2),  # TF 2.15 honours it where tf_keras is installed
        ((2, 15), True, False, "2.15.0", "keras", 2),
        ((2, 15), False, True, "3.0.5", "keras", 3),  # Keras 3 installed over TF 2.15's Keras 2
        ((2, 16), False, True, "3.0.5", "keras", 3),
        ((2, 16), True, True, "3.0.5", "tf_keras", 2),
        ((2, 21), False, True, "3.15.1", "keras", 3),
        ((2, 21), True, True, "3.15.1", "tf_keras", 2),
        ((2, 21), False, True, None, "keras", 3),
    ],
)
def test_what_tf_keras_is(tensorflow, legacy, installed, keras, package, major):
    assert keras_semantics.tf_keras_package(tensorflow, legacy, installed) == package
    assert keras_semantics.tf_keras_major(tensorflow, legacy, keras, installed) == major


def _package(name: str, version: str | None) -> types.ModuleType:
    module = types.ModuleType(name)
    if version is not None:
        module.__version__ = version
    return module


@pytest.mark.parametrize(
    "name,version,adapter",
    [
        ("keras", "2.13.1", keras2),
        ("keras", "2.15.0", keras2),
        ("keras", "3.0.5", keras3),
        ("keras", "3.15.1", keras3),
        ("tf_keras", "2.15.1", tf_keras),
        ("tf_keras", "2.21.0", tf_keras),
    ],
)
def test_the_adapter_follows_the_package_version(name, version, adapter):
    assert adapter_for(_package(name, version)) is adapter


@pytest.mark.parametrize("name,version", [("keras", "4.0.0"), ("keras", None), ("keras", "1.2.2")])
def test_a_keras_no_adapter_knows_is_said_so(name, version):
    with pytest.raises(UnsupportedKeras, match="no adapter for the keras package"):
        adapter_for(_package(name, version))


def test_every_adapter_lists_the_private_names_it_touches():
    for adapter in (keras2, keras3, tf_keras):
        assert adapter.PRIVATE_NAMES and all(".src." in n or n.startswith("Layer._") for n in adapter.PRIVATE_NAMES)


@pytest.mark.parametrize(
    "source,tensorflow,legacy,wanted",
    [
        ("import tensorflow as tf", "2.13.1", "1", {"keras"}),  # the seeds set the variable; TF 2.13 ignores it
        ("import tensorflow as tf", "2.15.1", "1", {"tf_keras"}),  # TF 2.15 honours it (tf_keras is installed here)
        ("import tensorflow as tf", "2.15.1", "0", {"keras"}),
        ("import tensorflow as tf", "2.21.0", "1", {"tf_keras"}),
        ("import tensorflow as tf", "2.21.0", "0", {"keras"}),
        ("import tf_keras", "2.21.0", "0", {"keras", "tf_keras"}),
        ("import keras\nimport tensorflow_hub", "2.21.0", "1", {"keras", "tf_keras", "hub"}),
        ("import tf_keras", "2.13.1", "1", {"keras", "tf_keras"}),
    ],
)
def test_the_hooked_packages(monkeypatch, source, tensorflow, legacy, wanted):
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", legacy)
    find_spec = importlib.util.find_spec  # tf_keras is installed, here or not
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "tf_keras" else find_spec(name))
    assert keras_adapter.flavours(ast.parse(source), tensorflow) == wanted


def test_a_package_that_cannot_be_imported_gets_no_hooks_and_the_file_keeps_its_exception(monkeypatch):
    recorder = hooks.Recorder(__file__)
    assert keras_adapter._importable("mpdoctor_no_such_keras", recorder) is None
    keras_adapter.check_unhooked(recorder)  # the file's own import failed the same way: its exception, not ours
    assert recorder.tool_failure is None
    monkeypatch.setitem(sys.modules, "mpdoctor_no_such_keras", types.ModuleType("mpdoctor_no_such_keras"))
    keras_adapter.check_unhooked(recorder)  # ...but it ran with the package loaded: unrecorded, mpdoctor's failure
    assert recorder.tool_failure.stage == "hooks"
    assert recorder.tool_failure.reason.startswith("ModuleNotFoundError: No module named 'mpdoctor_no_such_keras'")


# ------------------------------------------------------------------- the parent side of mpdoctor's own failures

FAILURE = {
    "stage": "hooks",
    "reason": "ModuleNotFoundError: No module named 'keras.src.layers.layer'",
    "where": "installing the hooks",
    "adapters": {"keras": "Keras 3"},
    "traceback": "Traceback (most recent call last):\n  ...\nModuleNotFoundError: No module named ...",
}
ENVIRONMENT = {"tensorflow": "2.15.1", "keras": "2.15.0", "tf_keras": "2.15.1", "keras_major": 2, "gpus": []}


def _failed_facts(**overrides) -> Facts:
    data = {"environment": ENVIRONMENT, "tool_failure": FAILURE, "status": "exception"}
    data["exception"] = {"type": "ModuleNotFoundError", "message": "No module named 'x'", "phase": "import"}
    data.update(overrides)
    return Facts.from_json(data)


def test_mpdoctors_failure_is_one_info_finding_never_the_users_exception():
    ctx = TraceContext("m.py", "m.py", "", None)
    found = diagnose(_failed_facts(), None, "", ctx, Config())
    assert [(d.code, d.severity.value) for d in found] == [("MP001", "info")]
    assert found[0].message.startswith(
        "mpdoctor cannot trace on TensorFlow 2.15.1 / Keras 2.15.0: ModuleNotFoundError: No module named "
        "'keras.src.layers.layer'"
    )
    assert "not an error of your code" in found[0].message
    assert any("traceback" in note for note in found[0].notes)
    assert any("keras -> Keras 3" in note for note in found[0].notes)


def test_without_mpdoctors_failure_the_users_exception_is_mp001_error():
    ctx = TraceContext("m.py", "m.py", "", None)
    # (a module not installed would be the environment's: MP003 info, tests/test_trace_layouts.py)
    raised = {"type": "ValueError", "message": "bad shape", "phase": "import"}
    found = diagnose(_failed_facts(tool_failure=None, exception=raised), None, "", ctx, Config())
    assert [(d.code, d.severity.value) for d in found] == [("MP001", "error")]
    assert "cannot trace" not in found[0].message


def test_incomplete_facts_neither_confirm_nor_withdraw_static_findings():
    ctx = TraceContext("m.py", "m.py", "", None)
    assert verdicts(_failed_facts(), ctx, Config()) is None
    assert verdicts(_failed_facts(tool_failure=None), ctx, Config()) == {}


def test_a_crash_of_the_child_stays_a_trace_failure():
    ctx = TraceContext("m.py", "m.py", "", None)
    found = diagnose(_failed_facts(), "the trace child was killed by SIGKILL (out of memory?)", "", ctx, Config())
    assert any(d.code == "MP001" and d.severity.value == "error" and "SIGKILL" in d.message for d in found)


def test_the_json_trace_carries_the_failure_and_the_environment():
    summary = TraceSummary.of("m.py", _failed_facts(), None).to_json()
    assert summary["status"] == "internal"
    assert summary["failure"].startswith("mpdoctor cannot trace on TensorFlow 2.15.1 / Keras 2.15.0: ")
    assert summary["environment"]["tensorflow"] == "2.15.1"
    assert summary["tool_failure"]["stage"] == "hooks"
    ok = TraceSummary.of("m.py", _failed_facts(tool_failure=None), None).to_json()
    assert ok["status"] == "exception" and "tool_failure" not in ok


def test_the_html_report_says_mpdoctor_cannot_trace_and_which_keras_it_found():
    summary = TraceSummary.of("m.py", _failed_facts(), None)
    stream = io.StringIO()
    write_report(Report(files_checked=1, passes=("static", "trace"), traces=[summary]), "html", stream)
    html = stream.getvalue()
    assert "m.py: mpdoctor cannot trace on TensorFlow 2.15.1 / Keras 2.15.0: ModuleNotFoundError" in html
    assert "trace failed" not in html
    assert "<td>Keras 2</td>" in html


def test_suppressions_of_trace_rules_are_not_unused_when_the_trace_rules_did_not_run():
    text = "x = 1  # noqa: MP404\n"
    assert [d.code for d in finish([], text, "m.py", Config(), ran_passes="ST")] == ["MP002"]
    assert finish([], text, "m.py", Config(), ran_passes="S") == []


def test_verbose_text_output_shows_the_notes():
    note = "mpdoctor's traceback:\nTraceback (most recent call last):\nKeyError: 'x'"
    finding = Diagnostic("MP001", "mpdoctor cannot trace", Location("m.py"), Severity.INFO, notes=(note,))
    shown = {}
    for verbose in (False, True):
        stream = io.StringIO()
        write_report(Report(diagnostics=[finding], files_checked=1), "text", stream, verbose=verbose)
        shown[verbose] = stream.getvalue()
    assert "KeyError" not in shown[False]
    assert "    note: mpdoctor's traceback:\n    Traceback (most recent call last):\n    KeyError: 'x'\n" in shown[True]


# ------------------------------------------------------------------ forced failures in the real trace child

MODELS = {
    "keras3": """\
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = keras.Input((8,))
        outputs = keras.layers.Dense(4, activation="softmax")(inputs)
        model = keras.Model(inputs, outputs)
        open(MARKER, "w").write("the file ran to its end")
        """,
    "tf_keras": """\
        import tf_keras as keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = keras.Input((8,))
        outputs = keras.layers.Dense(4, activation="softmax")(inputs)
        model = keras.Model(inputs, outputs)
        open(MARKER, "w").write("the file ran to its end")
        """,
}
ADAPTER_MODULE = {"keras3": "keras3", "tf_keras": "tf_keras"}
BREAK_ADAPTER = """\
    from mpdoctor.trace.child.adapters import {module}

    def install(hooks, package):
        raise ModuleNotFoundError("No module named '{missing}'", name="{missing}")

    {module}.install = install
    """
BREAK_HOOK = """\
    from mpdoctor.trace.child import hooks

    def _record_layer(*args, **kwargs):
        raise AttributeError("'Dense' object has no attribute '_dtype_policy'")

    hooks._record_layer = _record_layer
    """
MISSING = {"keras3": "keras.src.layers.layer", "tf_keras": "tf_keras.src.engine.base_layer"}


def _check(tmp_path: Path, flavour: str, breakage: str | None) -> tuple[subprocess.CompletedProcess, dict, Path]:
    """`mpdoctor check --format json` of a model file in a child whose sitecustomize breaks mpdoctor."""
    marker = tmp_path / "ran.txt"
    model = tmp_path / "model.py"
    model.write_text(f"MARKER = {str(marker)!r}\n" + textwrap.dedent(MODELS[flavour]))
    paths = [str(ROOT)]
    if breakage is not None:
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(textwrap.dedent(breakage))
        paths.insert(0, str(site))
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(paths),
        TF_USE_LEGACY_KERAS="1" if flavour == "tf_keras" else "0",
        TF_CPP_MIN_LOG_LEVEL="3",
        NO_COLOR="1",
    )
    done = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--format", "json", "--no-numerics", str(model)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr  # MP401 is an error either way
    return done, json.loads(done.stdout), marker


def _cannot_trace(report: dict) -> list[dict]:
    return [d for d in report["diagnostics"] if d["code"] == "MP001" and "mpdoctor cannot trace" in d["message"]]


pytestmark_tf = pytest.mark.usefixtures("tensorflow")


@pytestmark_tf
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_an_adapter_that_does_not_fit_is_reported_as_mpdoctors_failure(tmp_path, flavour):
    module = ADAPTER_MODULE[flavour]
    breakage = BREAK_ADAPTER.format(module=module, missing=MISSING[flavour])
    _, report, marker = _check(tmp_path, flavour, breakage)
    [info] = _cannot_trace(report)
    assert info["severity"] == "info"
    assert f"ModuleNotFoundError: No module named '{MISSING[flavour]}'" in info["message"]
    assert info["message"].startswith("mpdoctor cannot trace on TensorFlow ")
    # The static findings are kept; nothing else comes from the trace, no MP001 blames the file.
    assert [(d["code"], d["passes"]) for d in report["diagnostics"] if d["code"] == "MP401"] == [("MP401", ["static"])]
    assert not [d for d in report["diagnostics"] if d["code"] == "MP001" and d["severity"] == "error"]
    assert not any("trace" in d["passes"] for d in report["diagnostics"] if d is not info)
    [trace] = report["traces"]
    assert trace["status"] == "internal"
    assert trace["failure"].startswith("mpdoctor cannot trace on TensorFlow ")
    assert trace["tool_failure"]["stage"] == "hooks"
    assert trace["environment"]["tensorflow"] and trace["environment"]["keras"]
    assert not marker.exists()  # the file does not run without its hooks


@pytestmark_tf
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_a_hook_that_fails_while_the_file_runs_does_not_break_the_users_code(tmp_path, flavour):
    _, report, marker = _check(tmp_path, flavour, BREAK_HOOK)
    assert marker.read_text() == "the file ran to its end"
    [info] = _cannot_trace(report)
    assert info["severity"] == "info"
    assert "AttributeError: 'Dense' object has no attribute '_dtype_policy'" in info["message"]
    assert [d["passes"] for d in report["diagnostics"] if d["code"] == "MP401"] == [["static"]]
    assert not [d for d in report["diagnostics"] if d["code"] == "MP001" and d["severity"] == "error"]
    assert report["traces"][0]["tool_failure"]["stage"] == "hook"


@pytestmark_tf
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_without_a_failure_the_trace_reports_as_usual(tmp_path, flavour):
    _, report, marker = _check(tmp_path, flavour, None)
    assert marker.exists()
    assert not _cannot_trace(report)
    assert [d["passes"] for d in report["diagnostics"] if d["code"] == "MP401"] == [["static", "trace"]]
    assert report["traces"][0]["status"] == "ok" and "tool_failure" not in report["traces"][0]
