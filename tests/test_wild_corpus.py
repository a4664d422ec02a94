"""The static pass on public mixed-precision code (tests/data/wild/README.md): exactly the reviewed findings of
expected.json, file by file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from mpdoctor.config import Config
from mpdoctor.engine import check_paths

# What the reviewed findings were judged against: the static pass sees TensorFlow 2.21 / Keras 3 installed, so
# the no-TF stage reports the same (the "looks written for Keras 2 ... here" notes, the target's API range).
pytestmark = pytest.mark.usefixtures("recorded_environment")

WILD = Path(__file__).parent / "data" / "wild"
LICENCES = WILD.parent / "licences"
SOURCES = json.loads((WILD / "sources.json").read_text())
EXPECTED = json.loads((WILD / "expected.json").read_text())


def test_every_source_is_kept_described_and_redistributable():
    assert len(SOURCES) >= 40
    assert {p.name for p in (WILD / "files").iterdir()} == {s["file"] for s in SOURCES}
    assert {s["file"] for s in SOURCES} == set(EXPECTED["findings"])
    for source in SOURCES:
        assert source["licence"] in ("Apache-2.0", "MIT", "BSD-3-Clause"), source
        assert len(source["commit"]) == 40, source
        assert hashlib.sha256((WILD / "files" / source["file"]).read_bytes()).hexdigest() == source["sha256"], source
        assert (LICENCES / "__".join([*source["repository"].split("/"), *source["licence_file"].split("/")])).is_file()
    for findings in EXPECTED["findings"].values():
        for finding in findings:
            assert finding["verdict"] in ("correct", "wrong") and finding["review"], finding


def test_the_static_pass_reports_exactly_the_reviewed_findings(monkeypatch):
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)  # the Keras inferred from the environment: Keras 3
    paths = [WILD / "files" / s["file"] for s in SOURCES]
    report = check_paths(paths, Config())
    assert not report.errors, [e.render() for e in report.errors]
    actual: dict[str, set] = {s["file"]: set() for s in SOURCES}
    for d in report.diagnostics:
        actual[Path(d.location.path).name].add((d.location.cell, d.location.line, d.code))
    expected = {
        s["file"]: {(f["cell"], f["line"], f["code"]) for f in EXPECTED["findings"][s["file"]]} for s in SOURCES
    }
    unexpected = {f: sorted(actual[f] - expected[f]) for f in actual if actual[f] - expected[f]}
    lost = {f: sorted(expected[f] - actual[f]) for f in actual if expected[f] - actual[f]}
    assert not unexpected, f"findings outside expected.json (review them): {unexpected}"
    assert not lost, f"reviewed findings no longer reported: {lost}"
