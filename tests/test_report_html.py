"""HTML report: self-contained, escaped, CSP with one hashed script; finding cards with the fix as a diff; the layer
graph SVG (folding, layout); numerics chart; SavedModel and checkpoint tables; the template ships in the wheel."""

import base64
import hashlib
import io
import json
import os
import re
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import tomllib
from trace_support import write_overflowing_checkpoint

from mpdoctor.diagnostics import Diagnostic, Edit, Fix, Location, Report, Severity
from mpdoctor.facts.schema import ModelGraph, NumericsTable, TraceSummary
from mpdoctor.report.graph_svg import CHAIN_LIMIT, NESTED_INLINE_LIMIT, model_figures
from mpdoctor.report.html import render
from mpdoctor.report.numerics_svg import numerics_svg
from mpdoctor.sources import SourceText

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def node(node_id, cls="Dense", dtype="float16", **extra):
    return {
        "id": node_id,
        "name": node_id.split("/")[-1],
        "class": cls,
        "compute_dtype": dtype,
        "policy": "mixed_float16",
        "parent": None,
        "is_model": False,
        "savedmodel_handle": None,
        "is_output": False,
        "kind": "builtin",
        **extra,
    }


def chain_graph(length, dtypes=None):
    ids = [f"d{i}" for i in range(length)]
    nodes = [node(i, dtype=(dtypes or {}).get(i, "float16")) for i in ids]
    nodes[-1]["is_output"] = True
    return {
        "model": "m",
        "nodes": nodes,
        "edges": [{"source": a, "target": b, "dtype": "float16"} for a, b in pairwise(ids)],
    }


def _figures(graph: dict, finding_layers: set[str]):
    return model_figures(ModelGraph.from_json(graph), finding_layers)


def _chart(numerics: dict):
    return numerics_svg(NumericsTable.from_json(numerics))


def html_of(report) -> str:
    out = io.StringIO()
    render(report, out)
    return out.getvalue()


def hostile_report(tmp_path: Path) -> str:
    source = tmp_path / "model.py"
    source.write_text(f"import keras\nx = keras.layers.Dense(3, name='{HOSTILE}')\n")
    diagnostic = Diagnostic(
        "MP401",
        f"softmax in float16 in layer {HOSTILE}",
        Location(str(source), 2, 5, 2, 40, layer=HOSTILE),
        Severity.ERROR,
    )
    graph = {
        "nodes": [
            node(
                HOSTILE,
                is_output=True,
                predicted_input_dtypes=["float16"],
                output_dtypes=["float16"],
                created_at={"file": str(source), "line": 2},
            )
        ],
        "edges": [],
        "outputs": [],
    }
    report = Report(
        diagnostics=[diagnostic],
        files_checked=1,
        sources={str(source): SourceText(source, source.read_text())},
        traces=[
            TraceSummary.from_json(
                {"path": str(source), "models": [{"name": HOSTILE, "how": "build_model()", "graph": graph}]}
            )
        ],
    )
    return html_of(report)


def test_user_strings_are_escaped_and_the_only_script_is_ours_allowed_by_hash(tmp_path):
    html = hostile_report(tmp_path)
    assert HOSTILE not in html
    assert html.count(ESCAPED) >= 4  # card message, layer name, graph node, layer table
    scripts = re.findall(r"<script>(.*?)</script>", html, re.DOTALL)
    assert len(scripts) == 1 and html.lower().count("<script") == 1
    assert scripts[0] == (ROOT / "reports" / "templates" / "report.js").read_text()
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    [policy] = re.findall(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert "default-src 'none'" in policy and f"script-src 'sha256-{digest}'" in policy
    assert "unsafe-inline'; img" in policy and policy.count("unsafe") == 1  # inline styles only
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)


def test_findings_show_the_source_line_and_the_graph_marks_the_finding_layer(tmp_path):
    html = hostile_report(tmp_path)
    assert 'class="hit">   2  x = keras.layers.Dense' in html
    assert "MP401" in html and "float16-output-activation" in html
    assert re.search(rf'<g class="node finding" data-layer="{re.escape(ESCAPED)}"', html)


def test_the_fix_is_shown_as_a_diff(tmp_path):
    source = tmp_path / "model.py"
    source.write_text("import keras\nout = keras.layers.Dense(3, activation='softmax')\nprint(out)\n")
    edit = Edit(str(source), 2, 49, 2, 49, ', dtype="float32"')
    plain = Diagnostic("MP401", "softmax", Location(str(source), 2, 7), Severity.ERROR, fix=Fix("set dtype", (edit,)))
    html = html_of(
        Report(diagnostics=[plain], files_checked=1, sources={str(source): SourceText(source, source.read_text())})
    )
    assert '<span class="remove">-out = keras.layers.Dense(3, activation=&#39;softmax&#39;)</span>' in html
    assert (
        '<span class="add">+out = keras.layers.Dense(3, activation=&#39;softmax&#39;, dtype=&#34;float32&#34;)</span>'
    ) in html
    assert 'id="fixes"' not in html  # no --fix, no fixes section
    assert source.read_text().count("float32") == 0  # rendering never touches the file


def test_fixes_section_says_what_fix_did_and_whether_a_trace_verified_it(tmp_path):
    from mpdoctor.fix.results import UNVERIFIED, VERIFIED, FileFix

    source = tmp_path / "model.py"
    source.write_text(
        "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\n"
        "model = keras.Sequential([keras.layers.Dense(3, activation='softmax')])\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mpdoctor",
            "check",
            "--no-trace",
            "--fix",
            "--select",
            "MP401",
            "--html",
            "report.html",
            "model.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    html = (tmp_path / "report.html").read_text()
    assert 'id="fixes"' in html and "fixed MP401 (line 3)" in html
    assert f'<span class="tag">{UNVERIFIED}</span>' in html and "written" in html
    assert (
        '<span class="add">+model = keras.Sequential([keras.layers.Dense(3, activation=&#39;softmax&#39;, '
        "dtype=&#34;float32&#34;)])"
    ) in html
    assert 'dtype="float32"' in source.read_text()

    verified = FileFix("model.py", "x = 1\n", "x = 2\n", verification=VERIFIED, written=True)
    assert '<span class="tag verified">verified</span>' in html_of(Report(files_checked=1, fixes=[verified]))


def test_long_linear_chains_fold_into_one_box_but_findings_and_dtype_changes_stay_visible():
    [figure] = _figures(chain_graph(10), set())
    assert figure.layers == 10 and figure.boxes == 3  # d0 (source), d1..d8 folded, d9 (output)
    assert "8 layers: d1 … d8" in figure.svg and "Dense ×8" in figure.svg
    [figure] = _figures(chain_graph(10), {"d4"})
    assert figure.boxes == 7 and 'class="node finding" data-layer="d4"' in figure.svg  # d1-3 too short, d5-8 fold
    assert figure.svg.count('class="edge finding"') == 1
    [figure] = _figures(chain_graph(10, {f"d{i}": "float32" for i in range(5, 10)}), set())
    assert figure.boxes == 4  # d1-4 and d5-8 fold separately: the dtype changes between them
    [short] = _figures(chain_graph(CHAIN_LIMIT + 1), set())
    assert short.boxes == CHAIN_LIMIT + 1


def _boxes(svg):
    return {
        m[0]: (float(m[1]), float(m[2]))
        for m in re.findall(
            r'data-layer="([^"]+)" transform="translate\(([\d.]+),'
            r'([\d.]+)\)"',
            svg,
        )
    }


def test_layout_flows_downward_and_boxes_never_overlap():
    # a residual block: a -> b -> c -> add, a -> add; and 20 parallel branches from one input (rows wrap)
    nodes = [node(i) for i in ("a", "b", "c", "add")] + [node(f"p{i}") for i in range(20)]
    edges = [{"source": s, "target": t} for s, t in (("a", "b"), ("b", "c"), ("c", "add"), ("a", "add"))]
    edges += [{"source": "a", "target": f"p{i}"} for i in range(20)]
    [figure] = _figures({"nodes": nodes, "edges": edges}, set())
    boxes = _boxes(figure.svg)
    assert len(boxes) == 24 and len(set(boxes.values())) == 24
    for edge in edges:
        assert boxes[edge["target"]][1] > boxes[edge["source"]][1]


def test_a_big_nested_model_is_one_box_and_its_own_figure():
    inner = [node("backbone/in", "InputLayer", parent="backbone")] + [
        node(f"backbone/conv{i}", "Conv2D", parent="backbone", dtype="float16" if i % 2 else "float32")
        for i in range(NESTED_INLINE_LIMIT + 3)
    ]
    nodes = [node("input"), node("backbone", "Functional", is_model=True)] + inner + [node("head", is_output=True)]
    chain = [n["id"] for n in inner]
    edges = (
        [{"source": "input", "target": "backbone/in"}]
        + [{"source": a, "target": b} for a, b in pairwise(chain)]
        + [{"source": chain[-1], "target": "head"}]
    )
    main, nested = _figures({"model": "m", "nodes": nodes, "edges": edges}, {"conv3"})
    assert main.boxes == 3 and set(_boxes(main.svg)) == {"input", "backbone", "head"}
    assert 'class="node finding" data-layer="backbone"' in main.svg  # a finding inside marks the folded box
    assert nested.title == "backbone" and len(_boxes(nested.svg)) == len(inner)
    assert 'class="name">conv1<' in nested.svg  # named relative to the nested model
    small = [node("small/in", "InputLayer", parent="small"), node("small/d", parent="small")]
    figures = _figures(
        {
            "nodes": [node("small", "Functional", is_model=True)] + small,
            "edges": [{"source": "small/in", "target": "small/d"}],
        },
        set(),
    )
    assert len(figures) == 1 and set(_boxes(figures[0].svg)) == {"small/in", "small/d"}
    assert 'class="name">small/d<' in figures[0].svg  # drawn inline, named by its model


def test_savedmodel_layers_are_marked():
    graph = chain_graph(3)
    graph["nodes"][1].update(savedmodel_handle="/models/hub", kind="savedmodel", **{"class": "KerasLayer"})
    [figure] = _figures(graph, set())
    assert 'class="node savedmodel" data-layer="d1"' in figure.svg and "SavedModel" in figure.svg


NUMERICS = {
    "dtype": "float16",
    "reference_dtype": "float32",
    "batch_size": 2,
    "seed": 0,
    "skipped": None,
    "layers": [
        {
            "id": "in",
            "name": "in",
            "class": "InputLayer",
            "finite": True,
            "finite_reference": True,
            "max_abs": 1.0,
            "max_abs_reference": 1.0,
            "relative_error": 0.0,
        },
        {
            "id": "big",
            "name": "big<b>",
            "class": "Dense",
            "finite": True,
            "finite_reference": True,
            "max_abs": 3e4,
            "max_abs_reference": 3.0001e4,
            "relative_error": 1e-3,
        },
        {
            "id": "inf",
            "name": "inf",
            "class": "Dense",
            "finite": False,
            "finite_reference": True,
            "max_abs": None,
            "max_abs_reference": 9e5,
            "relative_error": None,
        },
        {
            "id": "out",
            "name": "out",
            "class": "Softmax",
            "finite": True,
            "finite_reference": True,
            "max_abs": 0.5,
            "max_abs_reference": 0.5,
            "relative_error": 2e-4,
        },
    ],
}


def test_numerics_chart_is_log_scale_marks_non_finite_layers_and_escapes_names():
    svg = _chart(NUMERICS)
    assert svg.count('class="point"') == 3 + 4 + 2  # max_abs (one missing), reference, positive relative errors
    assert svg.count('class="nonfinite"') == 1 and "inf: not finite in float16" in svg
    assert ">1e-4<" in svg and ">1e6<" in svg  # decades from the smallest to the largest value
    assert "big&lt;b&gt;" in svg and "big<b>" not in svg
    assert "float16 max 65504" in svg
    assert _chart({**NUMERICS, "layers": []}) is None


def test_the_report_has_numerics_signatures_and_checkpoint_audit_sections(tmp_path):
    savedmodel = {
        "path": "/m/sm",
        "error": None,
        "accepted_input_dtypes": ["float32"],
        "signatures": [
            {
                "name": "serving_default",
                "inputs": [{"name": "images", "dtype": "float32", "shape": [None, 3]}],
                "outputs": [{"name": "out", "dtype": "float16", "shape": [None, 8]}],
            }
        ],
        "functions": [],
    }
    rows = [
        {
            "key": f"layer/kernel{i}",
            "dtype": "float32",
            "shape": [2],
            "values": 2,
            "max_abs": 0.5,
            "overflow": 0,
            "flushed_fraction": 0.0,
            "subnormal_fraction": 0.0,
            "status": "ok",
        }
        for i in range(3)
    ]
    rows.append({**rows[0], "key": "dense/kernel", "max_abs": 1e5, "overflow": 2, "status": "overflow"})
    audit = {
        "target_dtype": "float16",
        "verdict": "1 variable overflows float16",
        "variables": rows,
        "summary": {"variables": 4, "overflow_variables": 1, "underflow_variables": 0, "nonfinite_variables": 0},
    }
    trace = {
        "path": "m.py",
        "environment": {
            "global_policy": "mixed_float16",
            "tensorflow": "2.21.0",
            "keras": "3.15.1",
            "hub": "0.16.1",
            "legacy_keras": False,
            "gpus": [],
        },
        "models": [
            {"name": "m", "how": "build_model()", "graph": chain_graph(2), "numerics": NUMERICS},
            {
                "name": "skipped",
                "how": "x",
                "graph": None,
                "numerics": {**NUMERICS, "skipped": "the model has no inputs"},
            },
        ],
        "savedmodels": [
            {"api": "hub.KerasLayer", "handle": "/m/sm", "savedmodel": savedmodel},
            {"api": "hub.load", "handle": "/m/sm", "savedmodel": savedmodel},
        ],
        "checkpoints": [{"api": "--checkpoint", "path": "/c/ckpt", "location": None, "audit": audit}],
    }
    html = html_of(Report(files_checked=1, passes=("static", "trace"), traces=[TraceSummary.from_json(trace)]))
    assert "<td>mixed_float16</td><td>2.21.0</td><td>3.15.1</td>" in html and "passes run: static, trace" in html
    assert html.count('class="numerics-chart"') == 1 and "skipped: the model has no inputs" in html
    assert html.count("<h3><code>/m/sm</code>") == 1 and "loaded by hub.KerasLayer, hub.load" in html
    assert re.search(r'<td>serving_default</td><td>output</td><td>out</td><td class="f16">float16</td>', html)
    assert html.index("dense/kernel") < html.index("layer/kernel0")  # problems first
    assert '<tr class="overflow"><td>dense/kernel</td>' in html and "1e+05" in html


def test_the_wheel_lists_every_package_and_ships_the_templates():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "mpdoctor").rglob("__init__.py")}
    assert on_disk | {"mpdoctor._templates"} == set(config["packages"])
    assert config["package-dir"]["mpdoctor._templates"] == "reports/templates"
    shipped = {p.name for p in (ROOT / "reports" / "templates").iterdir()}
    assert {"report.html.j2", "report.js"} <= shipped
    patterns = config["package-data"]["mpdoctor._templates"]
    assert all(any(Path(name).match(p) for p in patterns) for name in shipped)


def test_cli_html_flag_writes_the_checkpoint_audit_of_a_real_run(tmp_path, tensorflow):
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="3",
        TF_USE_LEGACY_KERAS="0",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    ckpt = tmp_path / "big" / "ckpt"
    write_overflowing_checkpoint(ckpt, env)
    model = tmp_path / "model.py"
    model.write_text(
        "import keras\n\nkeras.mixed_precision.set_global_policy('mixed_float16')\n\n\n"
        "def build_model():\n    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])\n"
    )
    report_file = tmp_path / "report.html"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mpdoctor",
            "check",
            "--format",
            "json",
            "--checkpoint",
            str(ckpt),
            "--html",
            str(report_file),
            str(model),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    [audit] = json.loads(result.stdout)["traces"][0]["checkpoints"]
    assert audit["api"] == "--checkpoint" and audit["audit"]["target_dtype"] == "float16"
    assert [v["key"] for v in audit["audit"]["variables"] if v["status"] == "overflow"] == [
        "kernel/.ATTRIBUTES/VARIABLE_VALUE"
    ]
    page = report_file.read_text()
    assert '<tr class="overflow"><td>kernel/.ATTRIBUTES/VARIABLE_VALUE</td>' in page
    assert 'id="checkpoints"' in page and 'data-code="MP302"' in page


def test_cli_html_flag_writes_the_page_beside_the_chosen_format(tmp_path, capsys):
    from mpdoctor.cli import main

    model = ROOT / "tests" / "fixtures" / "MP401" / "sequential_dense_softmax_keras3.py"
    page = tmp_path / "report.html"
    assert main(["check", "--no-trace", "--html", str(page), str(model)]) == 1
    assert "MP401" in capsys.readouterr().out  # the text report still goes to stdout
    assert 'data-code="MP401"' in page.read_text()
    assert main(["check", "--no-trace", "--html", str(tmp_path / "missing" / "r.html"), str(model)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("mpdoctor: error: ") and "missing/r.html: cannot write report" in line


# ---------------------------------------------------------------- what a reader needs (issue 18)


def test_the_numerics_chart_takes_the_panels_width_and_labels_every_layer():
    svg = _chart(NUMERICS)
    assert re.match(r'<svg [^>]*width="100%"', svg) and "viewBox" not in svg  # text keeps its size at any width
    labels = re.findall(r'<svg class="layer-label"[^>]*>.*?</svg>', svg)
    assert len(labels) == len(NUMERICS["layers"]) and "big&lt;b&gt;" in labels[1]
    columns = re.findall(r'<rect class="column"[^>]*><title>([^<]*)</title>', svg)
    assert columns == ["in (InputLayer)", "big&lt;b&gt; (Dense)", "inf (Dense)", "out (Softmax)"]  # hover names
    # The cross of the non-finite layer sits between the panel's title (baseline y=12) and the panel (y=32).
    [mark] = re.findall(r'<svg class="nonfinite"[^>]* y="(\d+)"', svg)
    assert int(mark) > 12 and int(mark) + 8 < 32
    assert "no relative error from layer `inf` on: the float16 run is non-finite there" in svg


def test_a_chart_without_relative_errors_says_why():
    layers = [{**row, "finite": i == 0, "relative_error": None} for i, row in enumerate(NUMERICS["layers"])]
    svg = _chart({**NUMERICS, "layers": layers})
    assert "relative error not shown: the float16 run is non-finite from layer `big&lt;b&gt;`" in svg
    assert svg.count('class="empty-note') == 1


def test_many_layers_get_every_kth_label_and_all_a_hover_name():
    layers = [{**NUMERICS["layers"][1], "id": f"l{i}", "name": f"l{i}"} for i in range(300)]
    svg = _chart({**NUMERICS, "layers": layers})
    labels = svg.count('class="layer-label"')
    assert 20 < labels < 300 and svg.count('class="column"') == 300


def test_a_float32_model_heading_names_no_dtype_pair():
    float32 = {**NUMERICS, "dtype": None, "layers": [], "skipped": "no layer computes in float16/bfloat16"}
    trace = {"path": "m.py", "models": [{"name": "m", "how": "x", "graph": None, "numerics": float32}]}
    html = html_of(Report(files_checked=1, passes=("static", "trace"), traces=[TraceSummary.from_json(trace)]))
    assert "None vs" not in html and 'Numerics per layer <span class="meta">(not compared)</span>' in html
    assert "skipped: no layer computes in float16/bfloat16" in html


def test_graph_boxes_show_the_whole_dtype():
    graph = chain_graph(2, dtypes={"d0": "bfloat16"})
    graph["nodes"][0]["class"] = "SomeVeryLongCustomAttentionLayerClass"
    [figure] = _figures(graph, set())
    details = re.findall(r'<text x="8" y="31" class="detail">([^<]*)</text>', figure.svg)
    assert details[0].endswith(" · bfloat16") and details[0].startswith("SomeVeryLong") and len(details[0]) <= 30
    assert details[1] == "Dense · float16"


def test_cards_are_ordered_by_severity_and_the_fixable_count_reads_as_in_the_text(tmp_path):
    from mpdoctor.report.text import render as render_text

    source = tmp_path / "model.py"
    source.write_text("a = 1\nb = 2\nc = 3\n")
    safe = Fix("safe", (Edit(str(source), 1, 1, 1, 2, "x"),))
    unsafe = Fix("unsafe", (Edit(str(source), 2, 1, 2, 2, "y"),), applicability="unsafe")
    diagnostics = [
        Diagnostic("MP601", "hint", Location(str(source), 1, 1), Severity.INFO, fix=safe),
        Diagnostic("MP207", "warning", Location(str(source), 2, 1), Severity.WARNING, fix=unsafe),
        Diagnostic("MP401", "error", Location(str(source), 3, 1), Severity.ERROR),
    ]
    report = Report(diagnostics=diagnostics, files_checked=1, sources={str(source): SourceText(source, "a = 1\n")})
    html = html_of(report)
    assert re.findall(r'data-severity="(\w+)"', html) == ["error", "warning", "info"]
    [fixable] = re.findall(r'<span class="fixable">([^<]*)</span>', html)
    text = io.StringIO()
    render_text(report, text)
    assert fixable == "1 fixable with --fix, 1 more with --unsafe-fixes"
    assert text.getvalue().splitlines()[-1].endswith(" 1 fixable with --fix ([*]), 1 more with --unsafe-fixes.")


def test_the_environment_table_says_whether_float16_runs_fast_here():
    def page(gpus):
        env = {"global_policy": "mixed_float16", "legacy_keras": False, "gpus": gpus}
        trace = TraceSummary.from_json({"path": "m.py", "environment": env})
        return html_of(Report(files_checked=1, passes=("static", "trace"), traces=[trace]))

    cpu = page([])
    assert 'float16: <span class="slow">no</span> <span class="meta">(no GPU)</span>' in cpu
    assert "--extend-select MP603" in cpu
    volta = page([{"name": "V100", "compute_capability": [7, 0]}])
    assert "float16: yes" in volta and "bfloat16: " in volta and "--extend-select MP603" not in volta
