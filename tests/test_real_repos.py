"""The real-repository corpus of issue 31 (tests/data/real_repos): its manifest is complete (every directory has a
SOURCES.md row, its LICENSE and an expected.toml record whose entries exist), its files parse, and
bench/real_repos.py judges a trace report as it says. The trace measurements themselves are bench/real_repos.py's
(minutes per repository): see tests/data/real_repos/RESULTS.md."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "real_repos.py"
_spec = importlib.util.spec_from_file_location("bench_real_repos", BENCH)
assert _spec and _spec.loader
real_repos = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = real_repos  # dataclasses look their module up there
_spec.loader.exec_module(real_repos)

CORPUS = real_repos.CORPUS
DATA = CORPUS.parent
REPOS = real_repos.load_corpus()
RAW = {raw["dir"]: raw for raw in __import__("tomllib").loads((CORPUS / "expected.toml").read_text())["repo"]}
PERMISSIVE = {"MIT": ("MIT License", "Permission is hereby granted"), "Apache-2.0": ("Apache License",)}
# A shell escape or magic line: IPython turns it into a call before Python parses the cell.
MAGIC = re.compile(r"^\s*[!%]")


def directories() -> list[str]:
    return sorted(path.name for path in CORPUS.iterdir() if path.is_dir())


def test_at_least_twenty_repositories_each_with_sources_licence_and_ground_truth() -> None:
    sources = (CORPUS / "SOURCES.md").read_text(encoding="utf-8")
    assert len(directories()) >= 20
    assert sorted(repo.dir for repo in REPOS) == directories()
    for repo in REPOS:
        raw = RAW[repo.dir]
        row = next((line for line in sources.splitlines() if line.startswith(f"| `{repo.dir}` |")), "")
        assert raw["commit"] in row and raw["repository"] in row and raw["licence"] in row, repo.dir
        assert re.fullmatch(r"[0-9a-f]{40}", raw["commit"])
        licence = (CORPUS / repo.dir / "LICENSE").read_text(encoding="utf-8")
        assert any(marker in licence for marker in PERMISSIVE[raw["licence"]]), repo.dir
        for entry in repo.entries:
            assert (CORPUS / repo.dir / entry.path).is_file(), f"{repo.dir}: {entry.path}"
            assert (CORPUS / repo.dir / entry.cwd).is_dir(), f"{repo.dir}: {entry.cwd}"
            assert entry.outcome, f"{repo.dir}: {entry.path} has no recorded outcome (run --ground-truth)"
            assert not entry.builds_model or entry.policy, f"{repo.dir}: {entry.path} builds a model under no policy"
            assert entry.built in ("import", "main"), f"{repo.dir}: {entry.path}"


def test_half_the_repositories_have_an_entry_that_builds_a_model_when_run() -> None:
    """The others fail in their own environment before any model exists (pins that do not install on Python 3.11,
    NumPy 2, a module cloned separately, TF1 code): recorded, and left out of the reach denominators."""
    building = [repo.dir for repo in REPOS if repo.model_entries]
    assert len(building) >= 10, building


def test_no_repository_is_shared_with_another_corpus() -> None:
    others = "\n".join(
        path.read_text(encoding="utf-8", errors="replace")
        for path in DATA.rglob("*")
        if path.is_file() and path.suffix in (".md", ".toml", ".json") and CORPUS not in path.parents
    )
    for repo in REPOS:
        assert f"github.com/{repo.repository}/" not in others, repo.repository
        assert f'"{repo.repository}"' not in others, repo.repository


@pytest.mark.slow
@pytest.mark.parametrize("repo", sorted(RAW))
def test_corpus_files_parse(repo: str) -> None:
    known = set(RAW[repo].get("upstream_syntax_errors", []))
    for path in sorted((CORPUS / repo).rglob("*")):
        relative = path.relative_to(CORPUS / repo).as_posix()
        if path.suffix == ".py":
            ast.parse(path.read_text(encoding="utf-8"), filename=relative)
        elif path.suffix == ".ipynb":
            cells = [
                cell for cell in json.loads(path.read_text(encoding="utf-8"))["cells"] if cell["cell_type"] == "code"
            ]
            for number, cell in enumerate(cells, 1):
                source = "".join(cell["source"])
                code = "\n".join("pass" if MAGIC.match(line) else line for line in source.splitlines())
                try:
                    ast.parse(code)
                except SyntaxError:
                    assert f"{relative}#{number}" in known, f"{relative}: code cell {number} does not parse"
                else:
                    assert f"{relative}#{number}" not in known


def _trace(path: str, models: int, exception: str | None = None) -> dict[str, object]:
    return {"path": path, "status": "exception" if exception else "ok", "models": [{}] * models, "exception": exception}


def test_judge_counts_an_entry_reached_only_by_its_own_record() -> None:
    repo = real_repos.Repo(
        "owner__name",
        "owner/name",
        (),
        (
            real_repos.Entry("train.py", ".", (), (), True, "float32", "1 model"),
            real_repos.Entry("nb.ipynb", ".", (), (), True, "mixed_float16", "1 model"),
            real_repos.Entry("setup.py", ".", (), (), False, "", "no model"),
        ),
    )
    report = {"traces": [_trace("models.py", 1), _trace("nb.ipynb", 0, "importing the file raised X\nmore")]}
    measured = real_repos.judge(repo, report, 0)
    assert measured.reached and measured.entries_reached == []
    assert measured.reasons == {
        "train.py": "not traced (no trace record)",
        "nb.ipynb": "importing the file raised X",
    }
    column = real_repos.Column("bare", {repo.dir: measured})
    assert real_repos.fractions([repo], column, {}) == {
        "repos": "1/1",
        "entries": "0/2",
        "entries_at_import": "0/0",
        "gate_failed": 0,
        "exit_2_or_crash": 0,
    }
    # the deps column counts only repositories whose declared dependencies all installed
    declared = real_repos.Repo(repo.dir, repo.repository, ("wandb",), repo.entries)
    deps = real_repos.Column("deps", {repo.dir: measured}, only_installable=True)
    assert real_repos.fractions([declared], deps, {repo.dir: {"wandb": False}})["repos"] == "0/0"
