"""The static pass on public mixed-precision code (tests/data/wild/README.md): exactly the reviewed findings of
expected.json, file by file. The files are collected locally (they are third-party code, kept out of the
repository); the test checks those present and is skipped without any."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpdoctor.config import Config
from mpdoctor.engine import check_paths

WILD = Path(__file__).parent / "data" / "wild"
SOURCES = json.loads((WILD / "sources.json").read_text())
EXPECTED = json.loads((WILD / "expected.json").read_text())
PRESENT = [s for s in SOURCES if (WILD / "files" / s["file"]).is_file()]


def test_every_source_is_described_and_redistributable():
    assert len(SOURCES) >= 40
    assert {s["file"] for s in SOURCES} == set(EXPECTED["findings"])
    for source in SOURCES:
        assert source["licence"] in ("Apache-2.0", "MIT", "BSD-3-Clause"), source
        assert len(source["commit"]) == 40 and len(source["sha256"]) == 64, source
    for findings in EXPECTED["findings"].values():
        for finding in findings:
            assert finding["verdict"] in ("correct", "wrong") and finding["review"], finding


@pytest.mark.skipif(not PRESENT, reason="the wild corpus is not collected here (tests/data/wild/collect.py)")
def test_the_static_pass_reports_exactly_the_reviewed_findings(monkeypatch):
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)  # the Keras inferred from the environment: Keras 3
    paths = [WILD / "files" / s["file"] for s in PRESENT]
    report = check_paths(paths, Config())
    assert not report.errors, [e.render() for e in report.errors]
    actual: dict[str, set] = {s["file"]: set() for s in PRESENT}
    for d in report.diagnostics:
        actual[Path(d.location.path).name].add((d.location.cell, d.location.line, d.code))
    expected = {
        s["file"]: {(f["cell"], f["line"], f["code"]) for f in EXPECTED["findings"][s["file"]]} for s in PRESENT
    }
    unexpected = {f: sorted(actual[f] - expected[f]) for f in actual if actual[f] - expected[f]}
    lost = {f: sorted(expected[f] - actual[f]) for f in actual if expected[f] - actual[f]}
    assert not unexpected, f"findings outside expected.json (review them): {unexpected}"
    assert not lost, f"reviewed findings no longer reported: {lost}"
