"""HTML report: self-contained, escaped, CSP; and the template ships in the wheel's package list."""

import io
import re
import tomllib
from pathlib import Path

from mpdoctor.diagnostics import Diagnostic, Location, Severity
from mpdoctor.engine import Report
from mpdoctor.report.html import render

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = "<script>alert(1)</script>"


def hostile_report(tmp_path: Path) -> str:
    source = tmp_path / "model.py"
    source.write_text(f"import keras\nx = keras.layers.Dense(3, name='{HOSTILE}')\n")
    diagnostic = Diagnostic("MP401", f"softmax in float16 in layer {HOSTILE}", Location(str(source), 2, 5, 2, 40,
                            layer=HOSTILE), Severity.ERROR)
    graph = {"nodes": [{"id": HOSTILE, "class": "Dense", "policy": "mixed_float16", "is_output": True,
                        "predicted_input_dtypes": ["float16"], "output_dtypes": ["float16"],
                        "created_at": {"file": str(source), "line": 2}}], "edges": [], "outputs": []}
    report = Report(diagnostics=[diagnostic], files_checked=1,
                    traces=[{"path": "model.py", "models": [{"name": HOSTILE, "how": "build_model()",
                                                             "graph": graph}]}])
    out = io.StringIO()
    render(report, out)
    return out.getvalue()


def test_user_strings_are_escaped_and_nothing_external_is_loaded(tmp_path):
    html = hostile_report(tmp_path)
    assert HOSTILE not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html.lower()
    assert 'http-equiv="Content-Security-Policy"' in html and "default-src 'none'" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)


def test_findings_show_the_source_line_and_the_graph(tmp_path):
    html = hostile_report(tmp_path)
    assert 'class="hit">   2  x = keras.layers.Dense' in html
    assert "MP401" in html and "float16-output-activation" in html
    assert html.count("<tr>") == 2  # header + one layer row


def test_the_wheel_lists_every_package_and_ships_the_templates():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "mpdoctor").rglob("__init__.py")}
    assert on_disk | {"mpdoctor._templates"} == set(config["packages"])
    assert config["package-dir"]["mpdoctor._templates"] == "reports/templates"
    assert (ROOT / "reports" / "templates" / "report.html.j2").is_file()
