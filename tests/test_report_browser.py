"""The HTML report in a real headless browser (Debian chromium, driven over the DevTools pipe): the DOM after the
page's script ran holds the findings and the layer graph, nothing logs an error, nothing is requested from the
network, and hostile layer names stay text. Screenshots are kept under artifacts/screenshots/ (CI artifacts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from headless_chromium import Chromium, find_chromium

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = find_chromium()

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)"),
    pytest.mark.usefixtures("tensorflow"),  # the trace pass
]

PAGE_FACTS = {
    "script_ran": "document.documentElement.classList.contains('js')",
    "codes": "[...document.querySelectorAll('.card')].map(c => c.dataset.code)",
    "graph_nodes": "document.querySelectorAll('.graph svg .node').length",
    "finding_nodes": "[...document.querySelectorAll('.graph svg .node.finding')].map(g => g.dataset.layer)",
    "node_layers": "[...document.querySelectorAll('.graph svg .node')].map(g => g.dataset.layer)",
    "scripts": "document.querySelectorAll('script').length",
    "images": "document.querySelectorAll('img, image, iframe, object, embed').length",
    "zoomed": "(() => { const g = document.querySelector('.graph'); if (!g) return null;"
    " g.querySelector('.zoom-in').click(); return g.dataset.scale; })()",
}


@pytest.fixture(scope="module")
def browser():
    with Chromium(CHROMIUM) as chromium:
        yield chromium


def check_to_html(model: Path, html: Path, cwd: Path, legacy: bool = False, fmt: str = "json"):
    """`mpdoctor check MODEL --format json --html HTML`: the JSON report (the HTML is written to `html`); with
    `fmt="text"`, the text output."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        TF_CPP_MIN_LOG_LEVEL="3",
        TF_USE_LEGACY_KERAS="1" if legacy else "0",
    )
    result = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--trace", "--format", fmt, "--html", str(html), str(model)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )
    assert result.returncode == 1, result.stderr  # findings
    return json.loads(result.stdout) if fmt == "json" else result.stdout


def open_in_browser(browser: Chromium, html: Path, name: str, width: int = 1280, evaluate: dict | None = None):
    screenshot = SCREENSHOTS / f"{name}.png"
    screenshot.unlink(missing_ok=True)
    page = browser.run_page(html, screenshot, evaluate={**PAGE_FACTS, **(evaluate or {})}, width=width)
    assert screenshot.stat().st_size > 10_000
    assert page.errors == [], page.console
    assert page.requests == [] and page.dialogs == []
    assert page.values["script_ran"] is True and page.values["scripts"] == 1
    return page


def test_first_seed_report(browser, tmp_path):
    html = tmp_path / "seed.html"
    report = check_to_html(Path("examples") / "hub_seed.py", html, cwd=ROOT, legacy=True)
    page = open_in_browser(browser, html, "hub_seed")
    rank = {"error": 0, "warning": 1, "info": 2}
    codes = [d["code"] for d in sorted(report["diagnostics"], key=lambda d: rank[d["severity"]])]
    assert "MP201" in codes and page.values["codes"] == codes  # the seed's SavedModel dtype mismatch, errors first
    # tf_keras's Sequential.add raised on the hub layer: the model failed to build, and the report says so rather
    # than drawing the input and Lambda it holds (issue 33)
    [model] = report["traces"][0]["models"]
    assert model["failed_build"] is True and [n["class"] for n in model["graph"]["nodes"]] == ["InputLayer", "Lambda"]
    assert page.values["graph_nodes"] == 0 and "Failed to build: importing the file raised TypeError" in page.dom
    assert "feature_extractor" in page.dom and "serving_default" in page.dom  # the signature table


def test_resnet50_report_is_readable(browser, tmp_path):
    model = tmp_path / "resnet.py"
    model.write_text(
        textwrap.dedent("""\
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")


        def build_model():
            return keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10)
        """)
    )
    html = tmp_path / "resnet.html"
    report = check_to_html(model, html, cwd=tmp_path)
    page = open_in_browser(browser, html, "resnet50")
    assert "MP401" in page.values["codes"]
    graph = report["traces"][0]["models"][0]["graph"]
    assert len(graph["nodes"]) > 170
    assert 40 < page.values["graph_nodes"] < len(graph["nodes"]) / 2  # folded chains, every branch still drawn
    assert page.values["finding_nodes"] == ["predictions"]


def test_hostile_layer_names_render_as_text(browser, tmp_path):
    hostile = {"<script>alert(1)</script>", "<img src=x onerror=alert(2)>"}
    model = tmp_path / "hostile.py"
    model.write_text(
        textwrap.dedent("""\
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")


        def build_model():
            inputs = keras.Input((4,))
            hidden = keras.layers.Dense(8, name="hidden")(inputs)
            outputs = keras.layers.Dense(3, activation="softmax", name="probs")(hidden)
            model = keras.Model(inputs, outputs)
            model.layers[1].name = "<img src=x onerror=alert(2)>"  # Keras refuses such names at construction
            model.layers[2].name = "<script>alert(1)</script>"
            return model
        """)
    )
    html = tmp_path / "hostile.html"
    check_to_html(model, html, cwd=tmp_path)
    page = open_in_browser(browser, html, "hostile_names")
    assert hostile <= set(page.values["node_layers"])
    assert page.values["finding_nodes"] == ["<script>alert(1)</script>"]
    assert page.values["images"] == 0
    text = browser.run_page(html, evaluate={"text": "document.body.innerText"}).values["text"]
    assert all(name in text for name in hostile)


# A report with something in every part a reader looks at: findings of every severity with safe and unsafe fixes, a
# float32-only model, a model whose float16 run turns non-finite in its first layer (so the relative-error panel
# has nothing to draw), a layer name too long for its box.
READER_MODEL = """\
import keras
import tensorflow as tf

MASK = -1e9  # a module constant: its MP403 fix is unsafe

reference = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8)], name="reference")  # float32

keras.mixed_precision.set_global_policy("mixed_float16")


class Exploding(keras.layers.Layer):
    def call(self, x):
        return tf.exp(x * 20.0) + MASK * tf.cast(x < -10.0, x.dtype)


model = keras.Sequential(
    [
        keras.Input((16,)),
        Exploding(name="exploding_exp_with_a_very_long_name"),
        keras.layers.Dense(30, activation="relu"),
        keras.layers.BatchNormalization(),
        keras.layers.Dense(10, activation="softmax"),
    ],
    name="classifier",
)
"""

READER_FACTS = {
    "severities": "[...document.querySelectorAll('.card[data-severity]')].map(c => c.dataset.severity)",
    "fixable": "document.querySelector('.counts .fixable').textContent",
    "chart_widths": "[...document.querySelectorAll('.chart-canvas')].map(c =>"
    " [c.clientWidth, c.querySelector('svg').getBoundingClientRect().width])",
    "axis_labels": "document.querySelectorAll('svg.numerics-chart .layer-label').length",
    "hover_columns": "document.querySelectorAll('svg.numerics-chart rect.column').length",
    "markers": "document.querySelectorAll('svg.numerics-chart .nonfinite').length",
    "markers_over_titles": "(() => { const hits = [];"
    " for (const svg of document.querySelectorAll('svg.numerics-chart'))"
    " { const titles = [...svg.querySelectorAll('text.title')].map(t => t.getBoundingClientRect());"
    " for (const mark of svg.querySelectorAll('.nonfinite path')) { const r = mark.getBoundingClientRect();"
    " for (const t of titles) if (r.left < t.right && t.left < r.right && r.top < t.bottom && t.top < r.bottom)"
    " hits.push(mark.parentNode.textContent); } } return hits; })()",
    "empty_notes": "[...document.querySelectorAll('svg.numerics-chart .empty-note')].map(t => t.textContent)",
    "numerics_headings": "[...document.querySelectorAll('h3')].filter(h => h.textContent.startsWith('Numerics'))"
    ".map(h => h.textContent)",
    "box_details": "[...document.querySelectorAll('.graph svg .node')].map(g => [g.querySelector('text.detail')"
    ".textContent, g.querySelector('text.detail').getBBox().width, g.querySelector('rect').getBBox().width])",
    "hardware": "[...document.querySelectorAll('td.hardware')].map(t => t.textContent)",
}


@pytest.mark.parametrize("width", [1400, 800])
def test_the_report_reads_well_at_1400_and_800_px(browser, tmp_path, width):
    model = tmp_path / "reader.py"
    model.write_text(READER_MODEL)
    html = tmp_path / "reader.html"
    text = check_to_html(model, html, cwd=tmp_path, fmt="text")
    page = open_in_browser(browser, html, f"report_{width}px", width=width, evaluate=READER_FACTS)
    facts = page.values
    # Findings by severity, errors first; the fixable count in the text output's words.
    rank = {"error": 0, "warning": 1, "info": 2}
    assert facts["severities"] == sorted(facts["severities"], key=rank.get)
    assert set(facts["severities"]) == {"error", "warning", "info"}
    summary = text.splitlines()[-1]
    assert facts["fixable"] == "1 fixable with --fix, 1 more with --unsafe-fixes"
    assert summary.endswith("1 fixable with --fix ([*]), 1 more with --unsafe-fixes."), summary
    # The chart fills its panel, names its layers, keeps markers off the titles, says why a panel is empty.
    [(panel, chart)] = facts["chart_widths"]  # one chart: the float32 model is not compared
    assert abs(panel - chart) <= 1 and panel > width * 0.8
    assert facts["axis_labels"] == facts["hover_columns"] == 4
    assert facts["markers"] == 4 and facts["markers_over_titles"] == []
    assert facts["empty_notes"] == [
        "relative error not shown: the float16 run is non-finite from layer `exploding_exp_with_a_very_long_name`"
    ]
    assert [h for h in facts["numerics_headings"] if "None" in h] == []
    assert any("(not compared)" in h for h in facts["numerics_headings"])
    assert any("(float16 vs float32" in h for h in facts["numerics_headings"])
    # Every graph box shows its whole dtype, inside the box.
    for detail, text_width, box_width in facts["box_details"]:
        assert detail.rsplit(" · ", 1)[-1] in ("float16", "float32"), detail
        assert text_width <= box_width - 8, detail
    assert [d for d, _, _ in facts["box_details"] if d.startswith("Batch")] == ["BatchNormalization · float16"]
    assert facts["hardware"] and all(h.startswith("float16: ") for h in facts["hardware"])


# Issue 33 item 8: a model that failed to build beside one that built, in one file (the run raised at import, so
# both are the models created before it raised).
BUILD_FAILURE_MODEL = """\
import keras
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")

inputs = keras.Input((16,))
x = keras.layers.Dense(32, name="projection_dense_layer")(inputs)
x = keras.layers.BatchNormalization()(x)
x = keras.layers.Dense(32, activation="relu")(x)
x = keras.layers.BatchNormalization()(x)
classifier = keras.Model(inputs, keras.layers.Dense(4, activation="softmax")(x), name="classifier")


class Scale(keras.layers.Layer):
    def call(self, x):
        return x * tf.constant([1.0, 2.0, 3.0, 4.0])


broken = keras.Sequential([keras.Input((4,)), Scale()], name="broken")
"""

ISSUE_33_FACTS = {
    "models": "[...document.querySelectorAll('section.model')].map(s => [s.querySelector('h2 code').textContent,"
    " s.querySelectorAll('.graph').length, (s.querySelector('.failed-build') || {}).textContent || null,"
    " [...s.querySelectorAll('p.meta')].map(p => p.textContent).filter(t => t.startsWith('skipped'))])",
    "environment_header": "[...document.querySelectorAll('table.environment th')].map(th => th.textContent)",
    "environment_files": "[...document.querySelectorAll('table.environment td.files')].map(td => td.textContent)",
    "message_code": "[...document.querySelectorAll('.card p.message')].map(p => [p.querySelectorAll('code').length,"
    " p.textContent.includes('`')])",
    "graph_centred": "[...document.querySelectorAll('.graph-canvas')].map(c => { const a = c.getBoundingClientRect(),"
    " b = c.querySelector('svg').getBoundingClientRect(); return Math.abs((a.left + a.right) - (b.left + b.right)) / 2;"
    " })",
    # [shown name (the text after the <title>), whole name, inside the chart]
    "labels": "[...document.querySelectorAll('svg.numerics-chart .layer-label text')].map(t => { const r ="
    " t.getBoundingClientRect(), s = t.closest('svg.numerics-chart').getBoundingClientRect();"
    " return [t.lastChild.textContent, t.querySelector('title').textContent,"
    " r.left >= s.left - 1 && r.bottom <= s.bottom + 1]; })",
}


@pytest.mark.parametrize("width", [1400, 800])
def test_issue_33_a_failed_build_files_code_and_whole_labels(browser, tmp_path, width):
    model = tmp_path / "build_failure.py"
    model.write_text(BUILD_FAILURE_MODEL)
    html = tmp_path / "build_failure.html"
    check_to_html(model, html, cwd=tmp_path)
    facts = open_in_browser(browser, html, f"issue33_{width}px", width=width, evaluate=ISSUE_33_FACTS).values
    models = {name: (graphs, failed, skipped) for name, graphs, failed, skipped in facts["models"]}
    # the model that failed to build: said so with the build error, no one-box graph, no "skipped: ..." numerics
    graphs, failed, skipped = models["broken"]
    assert graphs == 0 and skipped == [], models
    assert failed.startswith("Failed to build: importing the file raised TypeError: Input 'y' of 'Mul' Op"), failed
    graphs, failed, _ = models["classifier"]
    assert graphs == 1 and failed is None, models
    # the environment table names the file it describes
    assert facts["environment_header"][0] == "file" and facts["environment_files"] == ["build_failure.py"], facts
    # `backticks` in messages are code, never shown literally
    assert facts["message_code"] and all(codes > 0 and not literal for codes, literal in facts["message_code"])
    assert facts["zoomed"] == "1.250"  # the graph's zoom button (clicked before the measures below)
    # the graph sits in the middle of its panel, not in a column at its left edge
    assert facts["graph_centred"] and all(offset <= 2 for offset in facts["graph_centred"]), facts["graph_centred"]
    # numerics axis labels: whole names (batch_normalization_1, projection_dense_layer), inside the chart
    labels = facts["labels"]
    assert {shown for shown, _, _ in labels} >= {"projection_dense_layer", "batch_normalization_1"}, labels
    assert all(shown == name and inside for shown, name, inside in labels), labels


def test_issue_33_the_savedmodel_section_lists_the_loader_the_script_used(browser, tmp_path):
    """hub.KerasLayer loads through hub.load and tf.saved_model.load: the script called only the first."""
    html = tmp_path / "seed.html"
    check_to_html(Path("examples") / "hub_seed.py", html, cwd=ROOT, legacy=True)
    facts = open_in_browser(
        browser,
        html,
        "issue33_savedmodels",
        evaluate={
            "loaders": "[...document.querySelectorAll('h3 .meta')].map(s => s.textContent)"
            ".filter(t => t.startsWith('loaded by'))"
        },
    ).values
    assert facts["loaders"] == ["loaded by hub.KerasLayer"], facts
