"""Jupyter notebooks: IPython syntax as placeholders, findings at `cell N:line M` in every format, suppressions in
cells, directory walking, bad notebooks, and the trace pass running the cells in both Keras versions."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from test_cli import mpdoctor

from mpdoctor import notebook as notebook_module
from mpdoctor.config import Config
from mpdoctor.engine import TraceOptions, check_paths
from mpdoctor.notebook import NotebookError, parse_notebook, python_lines, read_notebook


def code(source: str) -> dict:
    return {
        "cell_type": "code",
        "metadata": {},
        "execution_count": None,
        "outputs": [],
        "source": textwrap.dedent(source).strip("\n").splitlines(keepends=True),
    }


def markdown(source: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": [source]}


def notebook(*cells: dict, language: str = "python") -> dict:
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "cells": list(cells),
        "metadata": {"kernelspec": {"name": "k", "display_name": "k", "language": language}},
    }


def write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data, indent=1))
    return path


def softmax_notebook(keras: str = "keras", head_dtype: str = "") -> dict:
    """Cell 3 (after a markdown cell and a setup cell full of IPython syntax) builds a model whose softmax head
    computes in float16 on line 5 of the cell."""
    imports = "from tensorflow import keras" if keras == "tf.keras" else "import keras"
    return notebook(
        markdown("# Mixed precision demo"),
        code(f"""
            %pip install -q keras
            !nvidia-smi
            {imports}
            gpus = !nvidia-smi -L
            keras.mixed_precision.set_global_policy("mixed_float16")
            """),
        code(f"""
            %%time
            model = keras.Sequential([
                keras.Input((8,)),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dense(4, activation="softmax"{head_dtype}),
            ])
            """),
        code("""
            %%bash
            echo "not python (" | grep -c x
            """),
        code("""
            model.summary?
            display(model)
            """),
    )


# --- the combined source -----------------------------------------------------------------------------------------


def test_ipython_syntax_becomes_placeholders_of_the_same_line_count():
    lines = [
        "%matplotlib inline",
        "!pip install x",
        "files = !ls",
        "a, b = %sx echo",
        "model.fit?",
        "?model",
        "x = 1 % 2",
        "if x:",
        "    !echo indented",
        "y = 7 \\",
        "%2",
        "z = (x",
        "    % 2",
        "    != 3)",
    ]
    out = python_lines(lines)
    assert out == [
        "pass",
        "pass",
        "files = None",
        "a, b = None",
        "pass",
        "pass",
        "x = 1 % 2",
        "if x:",
        "    pass",
        "y = 7 \\",
        "%2",
        "z = (x",
        "    % 2",
        "    != 3)",
    ]
    compile("\n".join(out), "cell", "exec")


IPYTHON_CELLS = [
    ["!pip install -q tf-models-official \\", "    tensorflow-text", "import keras"],
    ["if True:", "    !wget -q https://example.com/x.tgz \\", "        -O /tmp/x.tgz", "    y = 1"],
    ["files = !ls \\", "  -la", "x = 1"],
    ["%env A=1", "y = 7 \\", "%2", "model.fit?"],
    [">>> import keras", ">>> x = 1"],
    ["s = '!not a magic'", 't = "%d" % 3', "u = (1", "     != 2)"],
]


@pytest.mark.parametrize("cell", IPYTHON_CELLS, ids=range(len(IPYTHON_CELLS)))
def test_ipython_and_the_fallback_read_a_cell_alike(cell, monkeypatch):
    with_ipython = python_lines(cell)
    monkeypatch.setattr(notebook_module, "_ipython", lambda: None)
    assert python_lines(cell) == with_ipython
    assert len(with_ipython) == len(cell)
    compile("\n".join(with_ipython), "cell", "exec")


def test_a_shell_line_continued_on_an_indented_line_is_one_command():
    # IPython joins `!cmd \` and its indented continuation into one shell command; read as Python, the
    # continuation was an unexpected indent and the whole notebook a syntax error.
    assert python_lines(["!pip install a \\", "    b", "import keras"]) == ["pass", "", "import keras"]


@pytest.mark.parametrize("ipython", [True, False], ids=["ipython", "fallback"])
def test_a_notebook_with_a_continued_shell_line_is_checked(tmp_path, monkeypatch, ipython):
    if not ipython:
        monkeypatch.setattr(notebook_module, "_ipython", lambda: None)
    data = softmax_notebook()
    data["cells"][1]["source"] = ["!pip install -q keras \\\n", "    tensorflow\n"] + data["cells"][1]["source"]
    nb = parse_notebook(data)
    compile(nb.source, "nb", "exec")
    report = check_paths([write(tmp_path / "demo.ipynb", data)], Config())
    assert not report.errors
    assert [(d.code, d.location.cell, d.location.line) for d in report.diagnostics] == [("MP401", 3, 5)]


def test_messages_name_the_cell_and_line_of_what_they_cite(tmp_path):
    data = notebook(
        code("""
            import keras
            from keras import layers
            """),
        markdown("Build the model, then switch on mixed precision (too late)."),
        code("""
            model = keras.Sequential([keras.Input((4,)), layers.Dense(8), layers.Dense(2, dtype="float32")])
            """),
        code("""
            keras.mixed_precision.set_global_policy("mixed_float16")
            """),
    )
    report = check_paths([write(tmp_path / "late.ipynb", data)], Config())
    [d] = [d for d in report.diagnostics if d.code == "MP101"]
    assert (d.location.cell, d.location.line) == (4, 1)
    assert "Dense (cell 3, line 1)" in d.message, d.message
    assert "line 3)" not in d.message


def test_traceback_lines_of_other_files_are_not_rewritten():
    nb = parse_notebook(softmax_notebook())
    assert nb.map_text('File "/usr/lib/x.py", line 3, in f') == 'File "/usr/lib/x.py", line 3, in f'
    assert nb.map_text("built at line 1") == "built at cell 2, line 1"
    assert nb.map_text("line 9999 is past the end") == "line 9999 is past the end"


def test_cell_magics():
    assert python_lines(["%%bash", "echo (", "ls"]) == ["", "", ""]
    assert python_lines(["%%time", "!ls", "x = 1"]) == ["", "pass", "x = 1"]


def test_line_map_counts_every_cell_and_only_code_lines():
    nb = parse_notebook(softmax_notebook())
    assert nb.to_cell(1) == (2, 1)
    assert (
        nb.source.splitlines()[nb.line_map.index((3, 5))]
        .strip()
        .startswith('keras.layers.Dense(4, activation="softmax"')
    )
    assert nb.cell_line(3, 5).strip().startswith("keras.layers.Dense(4")
    assert len(nb.source.splitlines()) == len(nb.line_map)
    compile(nb.source, "nb", "exec")


def test_other_languages_have_no_python_and_nbformat_3_is_refused():
    assert parse_notebook(notebook(code("x <- 1"), language="R")).source == ""
    with pytest.raises(NotebookError, match="nbformat 3"):
        parse_notebook({"nbformat": 3, "worksheets": []})


# --- static pass through the command line --------------------------------------------------------------------------


def test_softmax_head_in_cell_3_is_mp401_at_cell_3_line_5(tmp_path):
    path = write(tmp_path / "demo.ipynb", softmax_notebook())
    before = path.read_bytes()
    result = mpdoctor("check", "--no-trace", "demo.ipynb", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines()[0].startswith("demo.ipynb:cell 3:line 5:col 5: MP401 "), result.stdout
    assert result.stderr == ""
    report = json.loads(mpdoctor("check", "--no-trace", "--format", "json", "demo.ipynb", cwd=tmp_path).stdout)
    [d] = report["diagnostics"]
    assert (d["code"], d["cell"], d["line"], d["end_line"]) == ("MP401", 3, 5, 5)
    assert d["fix"] is None and any("not applied to notebooks (shown as a diff of cell 3)" in n for n in d["notes"])
    assert path.read_bytes() == before


CELL_3_DIFF = """\
--- a/demo.ipynb (cell 3)
+++ b/demo.ipynb (cell 3)
@@ -2,5 +2,5 @@
 model = keras.Sequential([
     keras.Input((8,)),
     keras.layers.Dense(16, activation="relu"),
-    keras.layers.Dense(4, activation="softmax"),
+    keras.layers.Dense(4, activation="softmax", dtype="float32"),
 ])
"""


def test_diff_shows_the_fix_as_a_diff_of_the_cell_and_writes_nothing(tmp_path):
    path = write(tmp_path / "demo.ipynb", softmax_notebook())
    before = path.read_bytes()
    result = mpdoctor("check", "--no-trace", "--diff", "demo.ipynb", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (1, CELL_3_DIFF), result.stderr
    assert result.stderr.splitlines() == [
        "demo.ipynb: fixes are shown but not applied to notebooks: apply the diff to the cell",
        "1 fix for notebook cells shown, not applied.",
    ]
    assert path.read_bytes() == before
    plain = mpdoctor("check", "--no-trace", "demo.ipynb", cwd=tmp_path)
    assert (
        plain.stdout.splitlines()[-1]
        == "Found 1 problem (1 error) in 1 file. 1 fix for notebook cells (--diff shows it)."
    )
    assert "[*]" not in plain.stdout  # --fix would not apply it


def test_fix_says_the_notebook_is_not_edited_and_shows_the_cell_diff(tmp_path):
    path = write(tmp_path / "demo.ipynb", softmax_notebook())
    before = path.read_bytes()
    result = mpdoctor("check", "--no-trace", "--fix", "demo.ipynb", cwd=tmp_path)
    assert result.returncode == 1
    assert "demo.ipynb: 1 fix not applied: fixes are shown but not applied to notebooks" in result.stdout
    assert CELL_3_DIFF in result.stdout and "No fixes available" not in result.stdout + result.stderr
    assert path.read_bytes() == before
    # Applying the shown diff to the cell fixes it.
    write(path, softmax_notebook(head_dtype=', dtype="float32"'))
    assert mpdoctor("check", "--no-trace", "--diff", "demo.ipynb", cwd=tmp_path).stderr == "No fixes available.\n"


def test_the_html_card_of_a_notebook_finding_shows_the_cell_diff(tmp_path):
    write(tmp_path / "demo.ipynb", softmax_notebook())
    mpdoctor("check", "--no-trace", "--html", "report.html", "demo.ipynb", cwd=tmp_path)
    html = (tmp_path / "report.html").read_text()
    assert "not applied to notebooks: edit the cell" in html
    assert '<span class="file">--- a/demo.ipynb (cell 3)</span>' in html
    assert (
        '<span class="add">+    keras.layers.Dense(4, activation=&#34;softmax&#34;, dtype=&#34;float32&#34;),</span>'
        in html
    )


def test_fixed_head_is_clean(tmp_path):
    write(tmp_path / "demo.ipynb", softmax_notebook(head_dtype=', dtype="float32"'))
    result = mpdoctor("check", "--no-trace", "demo.ipynb", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_noqa_inside_a_cell(tmp_path):
    data = softmax_notebook()
    data["cells"][2]["source"][4] = data["cells"][2]["source"][4].rstrip("\n") + "  # noqa: MP401\n"
    write(tmp_path / "demo.ipynb", data)
    result = mpdoctor("check", "--no-trace", "demo.ipynb", cwd=tmp_path)
    assert result.returncode == 0, result.stdout


def test_sarif_github_gitlab_name_the_cell(tmp_path):
    from test_report_formats import validate_sarif

    write(tmp_path / "demo.ipynb", softmax_notebook())
    log = json.loads(mpdoctor("check", "--no-trace", "--format", "sarif", "demo.ipynb", cwd=tmp_path).stdout)
    validate_sarif(log)
    [result] = log["runs"][0]["results"]
    location = result["locations"][0]
    assert location["physicalLocation"]["artifactLocation"] == {"uri": "demo.ipynb", "uriBaseId": "%SRCROOT%"}
    assert location["physicalLocation"]["region"]["startLine"] == 5
    assert {"name": "cell 3", "kind": "cell"} in location["logicalLocations"]
    assert result["message"]["text"].startswith("cell 3, line 5: ")
    github = mpdoctor("check", "--no-trace", "--format", "github", "demo.ipynb", cwd=tmp_path).stdout
    assert github.startswith("::error file=demo.ipynb,title=MP401") and "::cell 3, line 5: " in github
    [issue] = json.loads(mpdoctor("check", "--no-trace", "--format", "gitlab", "demo.ipynb", cwd=tmp_path).stdout)
    assert issue["description"].startswith("MP401: cell 3, line 5: ")


def test_fingerprint_reads_the_cell_line_and_survives_a_new_cell_above(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "demo.ipynb", softmax_notebook())
    from mpdoctor.fingerprints import fingerprint_materials

    first = check_paths([Path("demo.ipynb")], Config())
    [a] = fingerprint_materials(first.diagnostics, first.sources)
    data = softmax_notebook()
    data["cells"].insert(1, code("print('a new cell')\nprint('two lines')"))
    write(tmp_path / "demo.ipynb", data)
    second = check_paths([Path("demo.ipynb")], Config())
    assert first.diagnostics[0].location.cell == 3 and second.diagnostics[0].location.cell == 4
    [b] = fingerprint_materials(second.diagnostics, second.sources)
    assert a == b and 'keras.layers.Dense(4, activation="softmax"),' in a


def test_directory_walk_picks_notebooks_and_skips_checkpoints_and_excludes(tmp_path):
    write(tmp_path / "demo.ipynb", softmax_notebook())
    (tmp_path / ".ipynb_checkpoints").mkdir()
    write(tmp_path / ".ipynb_checkpoints" / "demo-checkpoint.ipynb", softmax_notebook())
    (tmp_path / "scratch").mkdir()
    write(tmp_path / "scratch" / "old.ipynb", softmax_notebook())
    report = check_paths([tmp_path], Config(root=tmp_path))
    assert sorted(Path(d.location.path).name for d in report.diagnostics) == ["demo.ipynb", "old.ipynb"]
    config = Config(root=tmp_path)
    config.exclude += ("scratch",)
    report = check_paths([tmp_path], config)
    assert [Path(d.location.path).name for d in report.diagnostics] == ["demo.ipynb"]
    assert report.files_checked == 1


@pytest.mark.parametrize(
    "content,needle",
    [
        ("{not json", "not a valid notebook: invalid JSON"),
        (json.dumps({"nbformat": 3, "worksheets": []}), "not an nbformat 4 notebook (nbformat 3"),
    ],
)
def test_bad_notebook_is_one_line_exit_2(tmp_path, content, needle):
    (tmp_path / "bad.ipynb").write_text(content)
    result = mpdoctor("check", "--no-trace", "bad.ipynb", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("bad.ipynb: ") and needle in result.stderr


def test_syntax_error_in_a_cell_is_located_in_the_cell(tmp_path):
    write(tmp_path / "broken.ipynb", notebook(markdown("x"), code("import keras"), code("x = 1\ny = (")))
    result = mpdoctor("check", "--no-trace", "broken.ipynb", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("broken.ipynb:cell 3:line 2:col "), result.stderr
    [error] = json.loads(mpdoctor("check", "--no-trace", "--format", "json", "broken.ipynb", cwd=tmp_path).stdout)[
        "errors"
    ]
    assert (error["cell"], error["line"], error["kind"]) == (3, 2, "syntax")


# --- trace: the child runs the cells in order -----------------------------------------------------------------------


def _trace(path: Path, legacy: bool):
    import os

    previous = os.environ.get("TF_USE_LEGACY_KERAS")
    os.environ["TF_USE_LEGACY_KERAS"] = "1" if legacy else "0"
    try:
        return check_paths([path], Config(), TraceOptions(enabled=True, timeout=300))
    finally:
        if previous is None:
            os.environ.pop("TF_USE_LEGACY_KERAS", None)
        else:
            os.environ["TF_USE_LEGACY_KERAS"] = previous


def _output_dtype(source: str, directory: Path, legacy: bool) -> str:
    """Ground truth: run the cells as plain Python and print the model's output dtype."""
    from trace_support import run_python

    script = directory / "ground_truth.py"
    script.write_text("display = print\n" + source + "\nimport numpy as np\nprint(model(np.ones((2, 8))).dtype.name)\n")
    result = run_python(script, legacy=legacy)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_trace_runs_the_cells_and_confirms_mp401_in_cell_3(tmp_path, legacy, tensorflow):
    keras = "tf.keras" if legacy else "keras"
    (tmp_path / "nb").mkdir()
    broken = write(tmp_path / "nb" / "demo.ipynb", softmax_notebook(keras))
    assert _output_dtype(read_notebook(broken).source, tmp_path, legacy) == "float16"
    before = sorted(p.name for p in broken.parent.iterdir())
    report = _trace(broken, legacy)
    assert not report.errors
    assert report.traces and report.traces[0].status == "ok", report.traces
    [mp401] = [d for d in report.diagnostics if d.code == "MP401"]
    assert (mp401.location.cell, mp401.location.line) == (3, 5)
    assert mp401.passes == ("static", "trace")
    assert not [d for d in report.diagnostics if d.code == "MP001"], report.diagnostics
    assert sorted(p.name for p in broken.parent.iterdir()) == before  # nothing written next to the notebook
    [graph] = [m["graph"] for m in report.traces[0].to_json()["models"]]
    created = {node["name"]: node["created_at"] for node in graph["nodes"]}
    assert created[mp401.location.layer] == {"file": str(broken), "line": 5, "cell": 3}

    fixed = write(broken, softmax_notebook(keras, head_dtype=', dtype="float32"'))
    assert _output_dtype(read_notebook(fixed).source, tmp_path, legacy) == "float32"
    assert not [d for d in _trace(fixed, legacy).diagnostics if d.code == "MP401"]


def test_locations_past_the_end_and_spans_across_cells_stay_in_a_cell():
    from mpdoctor.diagnostics import Location

    nb = parse_notebook(notebook(code("a = 1\nb = 2"), markdown("m"), code("c = 3")))
    assert nb.map_location(Location("n", 2, 1, 3, 6)) == Location("n", 2, 1, 2, None, cell=1)
    assert nb.map_location(Location("n", 3, 1, 3, 6)) == Location("n", 1, 1, 1, 6, cell=3)
    assert nb.to_cell(99) == (3, 1)
    assert parse_notebook(notebook(markdown("only prose"))).to_cell(1) == (None, 1)


def test_trace_reports_an_exception_at_the_cell_that_raised(tmp_path, tensorflow):
    data = softmax_notebook(head_dtype=', dtype="float32"')
    data["cells"][4] = code("x = 1\nraise RuntimeError('boom in the last cell')")
    path = write(tmp_path / "boom.ipynb", data)
    report = _trace(path, legacy=False)
    [crash] = [d for d in report.diagnostics if d.code == "MP001"]
    assert (crash.location.cell, crash.location.line) == (5, 2)
    assert "RuntimeError: boom in the last cell" in crash.message


def test_html_snippet_shows_the_cells_own_lines(tmp_path):
    write(tmp_path / "demo.ipynb", softmax_notebook())
    assert mpdoctor("check", "--no-trace", "--html", "report.html", "demo.ipynb", cwd=tmp_path).returncode == 1
    html = (tmp_path / "report.html").read_text()
    # line 5 of cell 3, not line 5 of the notebook's JSON text
    assert 'class="hit">   5      keras.layers.Dense(4, activation=&#34;softmax&#34;),</span>' in html
