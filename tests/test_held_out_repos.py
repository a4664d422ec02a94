"""The held-out public repositories of issue 29 (tests/data/held_out_repos): the static pass runs over each one as
a project without crashing, and the classes marked `fixed = true` in expected.toml give their expected answers
(findings found, traps silent, targets right). bench/held_out.py prints the full before/after per class."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "held_out.py"
_spec = importlib.util.spec_from_file_location("bench_held_out", BENCH)
assert _spec and _spec.loader
held_out = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = held_out  # dataclasses look their module up there
_spec.loader.exec_module(held_out)

EXPECTED = held_out.load_expected()
REPOS = EXPECTED["repo"]
FIXED = {name for name, c in EXPECTED["classes"].items() if c["fixed"]}
PYTEST_NAMES = re.compile(r"^(test_.*|.*_test|conftest)\.py$")


def installed_tensorflow() -> tuple[int, ...]:
    """The installed TensorFlow release, read as the static pass reads it (metadata, never an import)."""
    try:
        return tuple(int(part) for part in importlib.metadata.version("tensorflow").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return ()


# expected.toml's "installed environment" targets are TF >= 2.16 (tf.keras is Keras 3): the no-TF stage has none
needs_keras3_tensorflow = pytest.mark.skipif(
    installed_tensorflow() < (2, 16), reason="the ground truth's installed target is TensorFlow >= 2.16"
)


def test_every_repository_is_described_licensed_and_small():
    assert len(REPOS) >= 10
    listed = (held_out.HELD_OUT / "SOURCES.md").read_text(encoding="utf-8")
    assert {r["dir"] for r in REPOS} == {p.name for p in held_out.HELD_OUT.iterdir() if p.is_dir()}
    for repo in REPOS:
        root = held_out.HELD_OUT / repo["dir"]
        assert repo["licence"] in ("Apache-2.0", "MIT", "BSD-3-Clause"), repo["dir"]
        assert re.fullmatch(r"[0-9a-f]{40}", repo["commit"]), repo["dir"]
        assert (root / "LICENSE").is_file() and repo["repository"] in listed and repo["commit"] in listed
        files = [p for p in root.rglob("*") if p.is_file()]
        assert sum(p.stat().st_size for p in files) < 300_000, repo["dir"]
        # this repository's pytest must not collect the corpus
        assert not [p for p in files if PYTEST_NAMES.match(p.name)], repo["dir"]
        for entry in repo.get("finding", []) + repo.get("trap", []):
            assert entry["class"] in EXPECTED["classes"] and entry["why"], (repo["dir"], entry)
            assert not entry["path"] or (root / entry["path"]).is_file(), (repo["dir"], entry["path"])


def test_a_trap_below_its_severity_is_no_false_alarm_and_a_finding_elsewhere_is_unreviewed():
    """The judge itself: an info MP101 where only a warning is wrong counts for the optional info finding."""
    repo = {
        "dir": "x",
        "trap": [{"code": "MP101", "path": "a.ipynb", "cell": 2, "line": 1, "min_severity": "warning", "class": "c"}],
        "finding": [
            {"code": "MP101", "path": "a.ipynb", "cell": 2, "line": 1, "optional": True, "class": "c"},
            {"code": ["MP103", "MP502"], "path": "b.py", "line": [3, 4], "class": "d"},
        ],
    }

    def diagnostic(code, path, line, severity, cell=None):
        return {"code": code, "path": path, "line": line, "cell": cell, "severity": severity, "message": ""}

    info = {"diagnostics": [diagnostic("MP101", "a.ipynb", 1, "info", 2), diagnostic("MP502", "b.py", 4, "error")]}
    judged = held_out.judge_repo(repo, 1, info, "")
    assert [k for k, _ in judged.true_positives] == ["c", "d"] and not judged.false_alarms and not judged.misses
    warning = {
        "diagnostics": [diagnostic("MP101", "a.ipynb", 1, "warning", 2), diagnostic("MP401", "b.py", 9, "error")]
    }
    judged = held_out.judge_repo(repo, 1, warning, "")
    assert [k for k, _ in judged.false_alarms] == ["c", "unreviewed"] and [k for k, _ in judged.misses] == ["d"]


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    return held_out.run_held_out(None, 2, tmp_path_factory.mktemp("held_out"))


def test_the_static_pass_checks_every_repository_without_crashing(judged):
    assert len(judged) == len(REPOS)
    for j in judged:
        assert j.exit_code in (0, 1) and not j.error, (j.name, j.exit_code, j.error)


@needs_keras3_tensorflow
def test_the_fixed_classes_give_their_expected_answers(judged):
    wrong = []
    for j in judged:
        wrong += [(j.name, "miss", where) for klass, where in j.misses if klass in FIXED]
        wrong += [(j.name, "false alarm", where) for klass, where in j.false_alarms if klass in FIXED]
        wrong += [(j.name, "target", t.wrong[:2]) for t in j.targets if t.klass in FIXED and not t.right]
    assert wrong == []
