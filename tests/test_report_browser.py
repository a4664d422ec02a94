"""The HTML report in a real headless browser (Debian chromium, driven over the DevTools pipe): the DOM after the
page's script ran holds the findings and the layer graph, nothing logs an error, nothing is requested from the
network, and hostile layer names stay text. Screenshots are kept under artifacts/screenshots/ (CI artifacts)."""

from __future__ import annotations

import importlib.util
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
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="the trace pass needs TensorFlow"),
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


def check_to_html(model: Path, html: Path, cwd: Path, legacy: bool = False) -> dict:
    """`mpdoctor check MODEL --format json --html HTML`: the JSON report (the HTML is written to `html`)."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        TF_CPP_MIN_LOG_LEVEL="3",
        TF_USE_LEGACY_KERAS="1" if legacy else "0",
    )
    result = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--trace", "--format", "json", "--html", str(html), str(model)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )
    assert result.returncode == 1, result.stderr  # findings
    return json.loads(result.stdout)


def open_in_browser(browser: Chromium, html: Path, name: str):
    screenshot = SCREENSHOTS / f"{name}.png"
    screenshot.unlink(missing_ok=True)
    page = browser.run_page(html, screenshot, evaluate=PAGE_FACTS)
    assert screenshot.stat().st_size > 10_000
    assert page.errors == [], page.console
    assert page.requests == [] and page.dialogs == []
    assert page.values["script_ran"] is True and page.values["scripts"] == 1
    return page


def test_first_seed_report(browser, tmp_path):
    html = tmp_path / "seed.html"
    report = check_to_html(Path("examples") / "hub_seed.py", html, cwd=ROOT, legacy=True)
    page = open_in_browser(browser, html, "hub_seed")
    codes = [d["code"] for d in report["diagnostics"]]
    assert "MP201" in codes and page.values["codes"] == codes  # the seed's SavedModel dtype mismatch
    graph = report["traces"][0]["models"][0]["graph"]
    assert page.values["graph_nodes"] == len(graph["nodes"]) > 0
    assert "feature_extractor" in page.dom and "serving_default" in page.dom  # the signature table
    assert page.values["zoomed"] == "1.250"


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
