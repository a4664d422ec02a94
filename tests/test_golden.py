"""The golden snapshot (tests/golden/snapshot.py): what `mpdoctor check` reports for every fixture, fix input,
example and golden input, in both Keras versions. A change of behaviour shows here as a diff; when it is intended,
re-record with `python tests/golden/snapshot.py --update` (and `--trace --update`) and review the diff of the files
under tests/golden/snapshots/ (one per input and pass)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "golden"))

import snapshot


def test_static_snapshot_is_unchanged():
    """The static pass reads the installed TensorFlow's version (which Keras `tf.keras` is): the harness fixes the
    installed versions it was recorded next to (snapshot.RECORDED_ENVIRONMENT), so it runs with any TensorFlow
    installed, or none."""
    actual = snapshot.take(snapshot.inputs(), trace=False, jobs=1)
    assert set(actual) == set(snapshot.load(trace=False)), "inputs added or removed: re-record the snapshot"
    found = snapshot.compare(snapshot.load(trace=False), actual)
    assert not found, "\n".join(found[:10])


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed")
def test_trace_snapshot_of_the_golden_inputs_and_examples_is_unchanged():
    """The trace snapshot holds every input; the suite re-runs the ones written for it (the golden inputs cover
    every trace rule) and the examples. `python tests/golden/snapshot.py --trace` compares them all."""
    paths = [p for p in snapshot.inputs() if p.startswith(("tests/golden/inputs/", "examples/"))]
    found = snapshot.compare(snapshot.load(trace=True), snapshot.take(paths, trace=True, jobs=2))
    assert not found, "\n".join(found[:10])
