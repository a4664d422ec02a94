"""The IPython extension, driven through IPython's InteractiveShell (no notebook server): %mpdoctor on a live model
(in-process), on a file (full check) and %%mpdoctor on a cell; HTML and text rendering; usage errors."""

from __future__ import annotations

import html
import re
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("IPython")
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

needs_tf = pytest.mark.usefixtures("tensorflow")

SOFTMAX_MODEL = textwrap.dedent("""\
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")


    def build_model():
        inputs = keras.Input((4,))
        hidden = keras.layers.Dense(8)(inputs)
        outputs = keras.layers.Dense(3, activation="softmax", name="probs"{dtype})(hidden)
        return keras.Model(inputs, outputs)
    """)


@pytest.fixture(scope="module")
def shell():
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "mpdoctor")
    yield ip
    ip.run_cell("import keras; keras.mixed_precision.set_global_policy('float32')")


def srcdoc(result) -> str:
    [document] = re.findall(r'srcdoc="([^"]*)"', result._repr_html_())
    return html.unescape(document)


def test_importing_mpdoctor_imports_neither_ipython_nor_tensorflow():
    probe = "import sys, mpdoctor; print(sorted(m for m in ('IPython', 'tensorflow', 'keras') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "[]"


def test_the_extension_registers_the_line_and_cell_magic(shell):
    magics = shell.magics_manager.magics
    assert "mpdoctor" in magics["line"] and "mpdoctor" in magics["cell"]


@needs_tf
def test_a_live_model_is_checked_in_process(shell, monkeypatch):
    import mpdoctor.trace.checks
    import mpdoctor.trace.runner

    def no_child(*_args, **_kwargs):
        raise AssertionError("%mpdoctor MODEL must not start a trace child")

    monkeypatch.setattr(mpdoctor.trace.runner, "run_trace", no_child)
    monkeypatch.setattr(mpdoctor.trace.checks, "run_trace", no_child)
    shell.run_cell(SOFTMAX_MODEL.format(dtype="") + "model = build_model()\n", store_history=False)
    result = shell.run_line_magic("mpdoctor", "model")
    assert [(d.code, d.location.layer) for d in result.diagnostics] == [("MP401", "probs")]
    assert result.report.passes == ("trace",)
    [summary] = [trace.to_json() for trace in result.report.traces]
    nodes = summary["models"][0]["graph"]["nodes"]  # Keras numbers default names per process: compare classes
    assert [(n["class"], n["compute_dtype"]) for n in nodes] == [
        ("InputLayer", "float16"),
        ("Dense", "float16"),
        ("Dense", "float16"),
    ] and nodes[-1]["id"] == "probs"
    numerics = summary["models"][0]["numerics"]  # float16 vs float32, as in the trace child
    assert numerics["skipped"] is None and [row["class"] for row in numerics["layers"]] == ["Dense", "Dense"]
    assert all(row["finite"] and row["relative_error"] < 0.05 for row in numerics["layers"])
    page = srcdoc(result)
    assert 'data-code="MP401"' in page and 'class="node finding" data-layer="probs"' in page
    name = shell.user_ns["model"].name
    assert repr(result).splitlines() == [
        f"<model {name}>:1:1: MP401 {result.diagnostics[0].message}",
        "Found 1 problem in the live model.",
    ]

    shell.run_cell(SOFTMAX_MODEL.format(dtype=', dtype="float32"') + "fixed = build_model()\n", store_history=False)
    assert [d.code for d in shell.run_line_magic("mpdoctor", "fixed").diagnostics] == []


@needs_tf
def test_a_live_tf_keras_model_is_checked_against_its_savedmodel_signatures(shell, tmp_path):
    from trace_support import make_float32_savedmodel

    handle = make_float32_savedmodel(tmp_path)
    shell.run_cell(
        textwrap.dedent(f"""\
        import numpy as np
        import tf_keras
        import tensorflow_hub as hub

        tf_keras.mixed_precision.set_global_policy("mixed_float16")
        broken = tf_keras.Sequential([hub.KerasLayer({str(handle)!r}), tf_keras.layers.Dense(2, dtype="float32")])
        fixed = tf_keras.Sequential([tf_keras.Input((3,)), hub.KerasLayer({str(handle)!r}, dtype="float32"),
                                     tf_keras.layers.Dense(2, dtype="float32")])
        tf_keras.mixed_precision.set_global_policy("float32")
        """),
        store_history=False,
    )
    result = shell.run_line_magic("mpdoctor", "broken")
    hub_layer = shell.user_ns["broken"].layers[0].name
    serious = [(d.code, d.location.layer) for d in result.diagnostics if d.severity.value != "info"]
    assert serious == [("MP201", hub_layer)]
    # The model has no input shape, so no sample batch: the numerics say, as info, that they did not run.
    assert all(d.code == "MP404" and "did not run" in d.message for d in result.diagnostics if d.code != "MP201")
    assert shell.run_cell("broken(np.ones((1, 3), np.float32))", store_history=False).error_in_exec is not None

    result = shell.run_line_magic("mpdoctor", "fixed")
    assert [d.code for d in result.diagnostics] == []
    assert shell.run_cell("fixed(np.ones((1, 3), np.float32))", store_history=False).error_in_exec is None
    [load] = result.report.traces[0].to_json()["savedmodels"]
    assert load["api"] == "hub.KerasLayer" and load["savedmodel"]["accepted_input_dtypes"] == ["float32"]
    page = srcdoc(result)
    assert "SavedModel signatures" in page and "serving_default" in page
    assert 'class="node savedmodel"' in page


@needs_tf
def test_a_file_gets_the_full_check(shell, tmp_path):
    model = tmp_path / "model.py"
    model.write_text(SOFTMAX_MODEL.format(dtype=""))
    result = shell.run_line_magic("mpdoctor", str(model))
    [mp401] = [d for d in result.diagnostics if d.code == "MP401"]
    assert mp401.passes == ("static", "trace") and mp401.location.line == 9
    static_only = shell.run_line_magic("mpdoctor", f"--no-trace {model}")
    assert static_only.report.passes == ("static",) and "MP401" in [d.code for d in static_only.diagnostics]


@needs_tf
def test_a_cell_is_checked_but_not_run_in_the_kernel(shell):
    shell.user_ns.pop("cell_ran", None)
    result = shell.run_cell_magic("mpdoctor", "", SOFTMAX_MODEL.format(dtype="") + "cell_ran = True\n")
    assert "cell_ran" not in shell.user_ns
    [mp401] = [d for d in result.diagnostics if d.code == "MP401"]
    assert mp401.passes == ("static", "trace") and mp401.location.path == "cell.py"
    page = srcdoc(result)
    assert re.search(r'<span class="hit">   9  +outputs = keras.layers.Dense\(3, activation=&#34;softmax&#34;', page)
    assert (
        '<span class="add">+    outputs = keras.layers.Dense(3, activation=&#34;softmax&#34;, name=&#34;probs&#34;, '
        "dtype=&#34;float32&#34;)(hidden)</span>" in page
    )
    # The cell has no file --fix could write: its fixes are shown, never suggested.
    text = repr(result)
    assert "--fix" not in text and "[*]" not in text and "--fix" not in page
    assert "apply it to the cell" in page and '<span class="fixable">1 fix shown as a diff of the cell</span>' in page


def test_usage_errors_are_one_line(shell, tmp_path):
    shell.user_ns["not_a_model"] = 42
    for line, message in (
        ("", "usage"),
        ("no_such_name", "no such file, and not a model"),
        ("not_a_model", "is a int, not a Keras model"),
        ("--fast x", "unknown option --fast"),
    ):
        with pytest.raises(UsageError, match=message):
            shell.run_line_magic("mpdoctor", line)
    with pytest.raises(UsageError, match="takes no target"):
        shell.run_cell_magic("mpdoctor", "model", "x = 1\n")
