"""The IPython extension, driven through IPython's InteractiveShell (no notebook server): %mpdoctor on a live model
(in-process), on a file (full check) and %%mpdoctor on a cell; HTML and text rendering; usage errors."""

from __future__ import annotations

import contextlib
import html
import io
import os
import re
import shutil
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
        "Found 1 problem (1 error) in the live model.",  # check's wording, the live model for the files
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
    # Where the visible cell has it: its `%%mpdoctor` line is line 1, the Dense line 10 (line 9 of the cell body).
    assert mp401.passes == ("static", "trace") and (mp401.location.path, mp401.location.line) == ("cell", 10)
    page = srcdoc(result)
    assert re.search(r'<span class="hit">  10  +outputs = keras.layers.Dense\(3, activation=&#34;softmax&#34;', page)
    assert (
        '<span class="add">+    outputs = keras.layers.Dense(3, activation=&#34;softmax&#34;, name=&#34;probs&#34;, '
        "dtype=&#34;float32&#34;)(hidden)</span>" in page
    )
    # The cell has no file --fix could write: its fixes are shown, never suggested.
    text = repr(result)
    assert text.startswith("cell:10:") and "a/cell\n" not in page and "a/cell" in page
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


def check_says(path, tmp_path) -> list[str]:
    """What `mpdoctor check --no-trace PATH` prints: its stderr lines, then its stdout lines."""
    from mpdoctor.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        main(["check", "--no-trace", "--no-cache", str(path)])
    return err.getvalue().splitlines() + out.getvalue().splitlines()


@pytest.mark.parametrize("kind", ["syntax error", "empty folder", "FIFO"])
def test_a_path_that_was_not_checked_reads_as_check_says_it(shell, tmp_path, kind):
    if kind == "syntax error":
        target = tmp_path / "broken.py"
        target.write_text("import keras\ndef f(:\n")
    elif kind == "FIFO":
        target = tmp_path / "pipe.py"
        os.mkfifo(target)
    else:
        target = tmp_path / "folder"
        target.mkdir()
    result = shell.run_line_magic("mpdoctor", f"--no-trace {target}")
    text = repr(result).splitlines()
    assert "All checks passed" not in repr(result) and "live model" not in repr(result)
    assert text == check_says(target, tmp_path)
    assert text[-1] in (
        "No problems found (0 files checked); 1 file could not be checked.",
        "No Python files found (0 files checked).",
    )
    assert "live model" not in srcdoc(result) and "0 files checked" in srcdoc(result)


def test_a_cell_that_does_not_parse_is_reported_at_its_visible_line(shell):
    result = shell.run_cell_magic("mpdoctor", "--no-trace", "import keras\n\ndef f(:\n")
    assert repr(result).splitlines() == [
        "cell:4:7: syntax error: invalid syntax",  # line 1 of the visible cell is `%%mpdoctor --no-trace`
        "No problems found (0 files checked); 1 file could not be checked.",
    ]


def test_a_cell_finding_points_at_the_visible_line_and_its_fix_at_the_cell(shell):
    cell = (
        "import keras\n"
        "keras.mixed_precision.set_global_policy('mixed_float16')\n"
        "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation='softmax')])\n"
    )
    result = shell.run_cell_magic("mpdoctor", "--no-trace", cell)
    [mp401] = result.diagnostics
    assert (mp401.location.path, mp401.location.line, mp401.location.column) == ("cell", 4, 46)
    assert repr(result).splitlines()[0].startswith("cell:4:46: MP401 ")
    assert repr(result).splitlines()[-1] == "Found 1 problem (1 error) in 1 file."
    page = srcdoc(result)
    assert re.search(r'<span class="hit">   4  +model = keras.Sequential', page)
    assert "   2  import keras" in page  # the snippet counts the lines as the cell shows them
    assert (
        "+model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation=&#39;softmax&#39;, dtype="
        in page
    )


def test_the_report_frame_fits_its_report_up_to_most_of_the_window(shell, tmp_path):
    (tmp_path / "m.py").write_text("x = 1\n")
    result = shell.run_line_magic("mpdoctor", f"--no-trace {tmp_path / 'm.py'}")
    page = result._repr_html_()
    assert "640px" not in page and "height: 80vh" in page and "resize: vertical" in page
    [frame] = re.findall(r'<iframe id="(mpdoctor-report-[0-9a-f]+)"', page)
    script = page[page.index("<script>") :]
    assert f'getElementById("{frame}")' in script and "mpdoctorReportHeight" in script
    # The report posts its height from inside the frame (its script, allowed by the report's CSP hash).
    assert "postMessage({ mpdoctorReportHeight:" in srcdoc(result)


# The frame's height once the report's message fitted it (the report is laid out after its load), within 5 s.
FITTED_FRAME_HEIGHT = """new Promise(resolve => {
    const frame = document.querySelector("iframe");
    let polls = 0;
    const poll = () => {
        if (frame.style.height.startsWith("min(") || polls++ > 100) resolve(frame.getBoundingClientRect().height);
        else setTimeout(poll, 50);
    };
    poll();
})"""


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (.ci/run installs it)")
def test_in_a_browser_the_frame_fits_a_short_report_and_scrolls_a_long_one(shell, tmp_path):
    from headless_chromium import Chromium, find_chromium

    model = "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\n"
    softmax = "m{n} = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation='softmax')])\n"
    (tmp_path / "short.py").write_text("x = 1\n")  # the summary alone
    (tmp_path / "long.py").write_text(model + "".join(softmax.format(n=n) for n in range(40)))
    heights = {}
    with Chromium(find_chromium()) as browser:
        for name in ("short", "long"):
            result = shell.run_line_magic("mpdoctor", f"--no-trace {tmp_path / name}.py")
            page = tmp_path / f"{name}.html"  # the output as a notebook shows it: in a page of its own
            page.write_text(f"<!DOCTYPE html><html><body>{result._repr_html_()}</body></html>")
            run = browser.run_page(
                page,
                evaluate={
                    "frame": FITTED_FRAME_HEIGHT,
                    "window": "window.innerHeight",
                },
            )
            assert run.errors == [], run.console
            heights[name] = run.values["frame"], run.values["window"]
    short, window = heights["short"]
    assert 150 < short < 0.6 * window  # fitted to the summary, not the fallback's 80% of the window
    assert heights["long"][0] == pytest.approx(0.8 * window, abs=2)  # at most 80% of the window: the frame scrolls
