"""mpdoctor.report.json_text writes exactly what `json.dumps(value, indent=2)` writes (the JSON, SARIF and GitLab
renderers use it instead, for speed)."""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import math
from pathlib import Path

import pytest

from mpdoctor.config import Config
from mpdoctor.diagnostics import Diagnostic, DiagnosticContext, Edit, Fix, Location, Severity
from mpdoctor.engine import check_paths
from mpdoctor.report import json_format, json_text, sarif
from mpdoctor.report.json_text import dumps_indented, write_indented

HERE = Path(__file__).parent


class Level(str, enum.Enum):
    HIGH = "high"


class Count(enum.IntEnum):
    TWO = 2


VALUES = [
    None,
    True,
    False,
    0,
    -7,
    2**70,
    1.5,
    -0.0,
    1e-300,
    math.inf,
    -math.inf,
    math.nan,
    "",
    "plain",
    'quote " backslash \\ tab \t newline \n',
    "non-ASCII é ✓ \U0001f600 and \x00 control",
    [],
    {},
    (),
    [[], {}, [[]], [{}]],
    (1, "two", (3.0, None)),
    {"a": 1, "b": [1, 2, {"c": None}], "d": {}},
    {7: "int key", 2.5: "float key", True: "bool key", False: "false key", None: "none key", "é": "str key"},
    {"level": Level.HIGH, "count": Count.TWO, "nested": [Level.HIGH, Count.TWO]},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_same_text_as_the_standard_library(value):
    assert dumps_indented(value) == json.dumps(value, indent=2)


def test_unserialisable_values_raise_as_the_standard_library_does():
    for value in (object(), {"k": {1, 2}}, {(1, 2): "tuple key"}):
        with pytest.raises(TypeError):
            json.dumps(value, indent=2)
        with pytest.raises(TypeError):
            dumps_indented(value)


def test_reports_of_the_fixtures_render_as_before():
    """A real report (findings with fixes, targets, summary) in the JSON and SARIF formats, byte for byte."""
    report = check_paths([HERE / "fixtures" / "MP403", HERE / "fixtures" / "MP103"], Config())
    assert report.diagnostics  # the comparison covers findings, not only an empty report
    for module in (json_format, sarif):
        document = module.to_dict(report)
        assert dumps_indented(document) == json.dumps(document, indent=2)


def test_written_in_pieces_the_text_is_the_same(monkeypatch):
    """write_indented writes every few thousand pieces (memory stays bounded); pieces of 3 here."""
    monkeypatch.setattr(json_text, "_FLUSH_AT", 3)
    value = {"diagnostics": [{"code": f"MP{i}", "edits": [[i, "x"], {}]} for i in range(20)], "empty": []}
    stream = io.StringIO()
    write_indented(value, stream)
    assert stream.getvalue() == json.dumps(value, indent=2)


def test_prerendered_findings_give_the_report_rendered_in_one_place():
    """check_paths(prerender=...) encodes each finding beside its check (in the static workers); the JSON report
    written from those texts is the one written from the findings themselves."""
    inputs = [HERE / "fixtures" / "MP403", HERE / "fixtures" / "MP103", HERE / "fixtures" / "MP401"]
    plain = check_paths(inputs, Config())
    prerendered = check_paths(inputs, Config(), prerender=json_format.prerender)
    assert len(prerendered.prerendered) == len(prerendered.diagnostics) > 10
    assert all(prerendered.prerendered_text(d) is not None for d in prerendered.diagnostics)
    assert render(prerendered) == render(plain) == json.dumps(json_format.to_dict(plain), indent=2) + "\n"


def test_the_prerender_template_writes_what_the_generic_encoder_writes():
    """json_format.prerender fills a template; every kind of finding it may meet gives the text of
    dumps_indented(diagnostic_to_dict(d)): real findings with fixes, and every optional field set or unusual."""
    real = check_paths([HERE / "fixtures" / "MP403", HERE / "fixtures" / "MP401"], Config()).diagnostics
    assert any(d.fix is not None for d in real)
    where = Location("dir/é.py", 3, 4, 5, 6, layer="dense_1", cell=2)
    edits = (Edit("dir/é.py", 1, 2, 1, 3, 'x = "é\n\t\\"'), Edit("b.py", 9, 1, 10, 1, ""))
    made = [
        Diagnostic("MP401", "message é ✓ \U0001f600 \x00", where, Severity.WARNING, passes=("static", "trace")),
        Diagnostic("MP401", "m", Location("a.py"), Severity.INFO, notes=("one", "two é"), fix=Fix("d", edits)),
        Diagnostic("MP401", "m", Location("a.py"), Severity.ERROR, fix=Fix("no edits", ()), passes=()),
        Diagnostic("MP401", "m", Location("a.py", cell=1), Severity.ERROR, cell_fix=Fix("cell", edits, cell=1)),
        Diagnostic("MP401", "m", where, Severity.ERROR, context=DiagnosticContext("mixed_float16", "t.py:1", None)),
        Diagnostic("MP401", "m", Location("a.py", line=True), Severity.ERROR),  # not an int: the generic way
        # Texts of shared values are kept by type and field: True after 1 (equal keys), a layer named as a path.
        Diagnostic("MP401", "m", Location("a.py", cell=1), Severity.ERROR),
        Diagnostic("MP401", "m", Location("a.py", cell=True), Severity.ERROR),
        Diagnostic("MP401", "m", Location("a.py", layer="a.py"), Severity.ERROR, notes=("static",)),
        Diagnostic("MP401", "m", Location("a.py"), Severity.ERROR, fix=Fix("d", (Edit("a.py", 1, 2, None, 3, ""),))),
    ]
    for d in [*real, *made]:
        assert json_format.prerender(d) == dumps_indented(json_format.diagnostic_to_dict(d), depth=2)


def test_a_prerendered_text_belongs_to_its_diagnostic_only():
    """The text is written for the very diagnostic it was computed for (it is, not a stale copy): a finding
    replaced after the check (a new object, whatever its id) is encoded afresh."""
    report = check_paths([HERE / "fixtures" / "MP403"], Config(), prerender=json_format.prerender)
    first = report.diagnostics[0]
    report.prerendered[id(first)] = (first, dumps_indented({"code": "MARKER"}, depth=2))
    assert '"code": "MARKER"' in render(report)  # the stored text is what is written
    replaced = dataclasses.replace(first, message="changed")
    report.diagnostics[0] = replaced
    report.prerendered[id(replaced)] = (first, dumps_indented({"code": "MARKER"}, depth=2))  # another's entry
    text = render(report)
    assert "MARKER" not in text and '"message": "changed"' in text


def render(report) -> str:
    stream = io.StringIO()
    json_format.render(report, stream)
    return stream.getvalue()
