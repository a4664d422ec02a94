"""Scale (issue 8): the static pass finishes with the right findings on a 50,000-line file and a 2,000-file tree.
Time and peak RSS are measured by `python bench/run.py --only static`, never asserted here."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import pytest

from mpdoctor.config import Config
from mpdoctor.engine import check_paths, check_source

_spec = importlib.util.spec_from_file_location(
    "bench_synthetic", Path(__file__).parent.parent / "bench" / "_synthetic.py"
)
synthetic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synthetic)


def per_block_findings() -> Counter:
    """What one synthetic block adds, from a 1-block and a 2-block module (not hard-coded)."""
    one, _ = check_source(synthetic.module_text(1), "one.py", Config())
    two, _ = check_source(synthetic.module_text(2), "two.py", Config())
    added = Counter(d.code for d in two) - Counter(d.code for d in one)
    assert added and Counter(d.code for d in one) == added  # every finding comes from the block
    return added


@pytest.mark.slow
def test_a_50000_line_file(tmp_path):
    path = synthetic.big_file(tmp_path / "big_model.py", 50_000)
    text = path.read_text()
    blocks = text.count("def build_model_")
    assert text.count("\n") >= 50_000
    diagnostics, error = check_source(text, "big_model.py", Config())
    assert error is None
    assert Counter(d.code for d in diagnostics) == Counter(
        {code: n * blocks for code, n in per_block_findings().items()}
    )
    assert diagnostics[-1].location.line > 49_990  # the findings reach the end of the file


@pytest.mark.slow
def test_a_directory_of_2000_files(tmp_path):
    tree = synthetic.many_files(tmp_path / "tree", 2_000, blocks_per_file=3)
    report = check_paths([tree], Config())
    assert report.files_checked == 2_000 and not report.errors
    with_models = 2_000 - 2_000 // 5  # every fifth file is a plain helper
    expected = Counter({code: n * 3 * with_models for code, n in per_block_findings().items()})
    assert Counter(d.code for d in report.diagnostics) == expected
    # Memory stays bounded: no file's context (its whole AST) outlives its check. Regression: a rule's cache
    # of per-function flows kept every context alive (11 MiB per 100 files).
    import gc

    from mpdoctor.static.context import StaticContext

    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, StaticContext)]
