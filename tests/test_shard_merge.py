"""`check --shard I/N` and `mpdoctor merge` (issue 17): the shards of a run cover every file once, and merging their
JSON reports gives the unsharded report, in JSON and in text, with a baseline applied once; an incomplete set is
refused (issue 33; the other refusals: tests/test_reliability2_merge.py)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from test_cli import mpdoctor

FIXTURES = Path(__file__).parent / "fixtures"
NOTEBOOK = Path(__file__).parent / "golden" / "inputs" / "softmax_notebook.ipynb"


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("shards")
    shutil.copytree(FIXTURES, root / "fixtures")
    # a notebook: its fix is shown as a diff of its cell (`cell_fix`), which the merged text summary counts too
    shutil.copy(NOTEBOOK, root / "fixtures" / NOTEBOOK.name)
    return root


def _json(tree: Path, *args: str) -> dict:
    result = mpdoctor("check", "--no-trace", "--format", "json", *args, "fixtures", cwd=tree)
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def test_four_shards_cover_every_file_exactly_once_and_merge_into_the_unsharded_report(tree):
    whole = _json(tree)
    for index in range(1, 5):
        (tree / f"shard{index}.json").write_text(json.dumps(_json(tree, "--shard", f"{index}/4")))
    shards = [json.loads((tree / f"shard{i}.json").read_text()) for i in range(1, 5)]
    assert all(s["summary"]["files"] > 0 for s in shards)
    assert [s["shard"] for s in shards] == [{"index": i, "count": 4} for i in range(1, 5)] and "shard" not in whole
    assert sum(s["summary"]["files"] for s in shards) == whole["summary"]["files"]
    paths = [{d["path"] for d in s["diagnostics"]} for s in shards]
    assert not any(paths[i] & paths[j] for i in range(4) for j in range(i + 1, 4))

    merged = mpdoctor("merge", "--format", "json", *(f"shard{i}.json" for i in range(1, 5)), cwd=tree)
    assert merged.returncode == 1  # the fixtures have findings: the same exit code as `check`
    assert json.loads(merged.stdout) == whole
    # any three of the four: refused, never a report that silently lacks a quarter of the files (#33)
    for left_out in range(1, 5):
        three = mpdoctor("merge", *(f"shard{i}.json" for i in range(1, 5) if i != left_out), cwd=tree)
        assert three.returncode == 2 and f"{left_out}/4 missing" in three.stderr and three.stdout == ""

    text = mpdoctor("merge", *(f"shard{i}.json" for i in range(1, 5)), cwd=tree)
    unsharded = mpdoctor("check", "--no-trace", "fixtures", cwd=tree)
    assert text.stdout == unsharded.stdout and re.search(r"for notebook cells \(--diff shows (it|them)\)", text.stdout)
    cell_fixes = [d["cell_fix"] for d in whole["diagnostics"] if "cell_fix" in d and d["path"].endswith(NOTEBOOK.name)]
    assert [(f["cell"], f["edits"][0]["line"]) for f in cell_fixes] == [(3, 5)]  # a line of cell 3


def test_merge_applies_the_baseline_once(tree):
    assert mpdoctor("check", "--no-trace", "--write-baseline", "base.json", "fixtures", cwd=tree).returncode == 0
    for index in (1, 2):
        (tree / f"half{index}.json").write_text(json.dumps(_json(tree, "--shard", f"{index}/2")))
    merged = mpdoctor("merge", "--format", "json", "--baseline", "base.json", "half1.json", "half2.json", cwd=tree)
    report = json.loads(merged.stdout)
    assert merged.returncode == 0 and report["diagnostics"] == []
    assert report["summary"]["baselined"] == _json(tree)["summary"]["total"] > 0


@pytest.mark.parametrize("shard", ["0/4", "5/4", "1", "a/b", "1/0"])
def test_a_bad_shard_is_a_usage_error(tree, shard):
    result = mpdoctor("check", "--no-trace", "--shard", shard, "fixtures", cwd=tree)
    assert result.returncode == 2 and "--shard" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "reason"),
    [("{", "not JSON"), ('{"version": 1}', "not an mpdoctor JSON report"), ("", "not JSON")],
)
def test_merge_names_the_report_it_cannot_read(tree, content, reason):
    (tree / "bad.json").write_text(content)
    result = mpdoctor("merge", "bad.json", cwd=tree)
    assert result.returncode == 2
    assert result.stderr.startswith("mpdoctor: error: bad.json: ") and reason in result.stderr
    assert mpdoctor("merge", "missing.json", cwd=tree).returncode == 2
