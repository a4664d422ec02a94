"""No MP103/MP104 false positives on files that target Keras 2, with TensorFlow 2.21 installed: mpdoctor judges them
against the target their own project declares (tests/data/target_corpus/README.md)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import tomllib

from mpdoctor.config import Config
from mpdoctor.engine import check_paths
from mpdoctor.project import environment

CORPUS = Path(__file__).parent / "data" / "target_corpus"
LICENCES = CORPUS.parent / "licences"
REPRO = sorted(p for p in (CORPUS / "repro").iterdir() if p.is_dir())
MANIFEST = tomllib.loads((CORPUS / "MANIFEST.toml").read_text(encoding="utf-8"))["file"]
VERSION_CODES = {"MP103", "MP104"}


def findings(directory: Path, monkeypatch, paths: list[Path] | None = None):
    monkeypatch.chdir(directory)
    return check_paths(paths or [Path(".")], Config())


@pytest.fixture(autouse=True)
def installed_tensorflow_2_21(monkeypatch):
    """The environment of the issue: a fresh venv pulled TF 2.21 (tf.keras is Keras 3 there)."""
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    monkeypatch.setattr(environment, "tensorflow_version", lambda: (2, 21))
    monkeypatch.setattr(environment, "standalone_keras_major", lambda: 3)


# Projects whose declaration mpdoctor cannot read (NVIDIA's Merlin container, absent from the table): the target is
# any TensorFlow 2, Keras 2 or 3, and MP103 reports `get_scaled_loss` for the Keras 3 part at medium confidence,
# without a fix; the API MP103 reports never makes the file Keras 2 (issue 29).
UNREAD_DECLARATION = {"nv-sim", "nv-sim-main", "nv-wide-deep-trainer"}


def version_findings(report, slug: str) -> list:
    if slug in UNREAD_DECLARATION:
        assert all(not t.keras_certain for t in report.targets.values())
        uncertain = [d for d in report.diagnostics if d.code == "MP103"]
        assert uncertain and all(d.confidence.value == "medium" and d.fix is None for d in uncertain)
        return [d for d in report.diagnostics if d.code in VERSION_CODES and d not in uncertain]
    return [d for d in report.diagnostics if d.code in VERSION_CODES]


@pytest.mark.parametrize("project", REPRO, ids=[p.name for p in REPRO])
def test_repro_corpus(project, monkeypatch):
    report = findings(project, monkeypatch)
    assert report.files_checked and not report.errors
    wrong = [(d.code, d.location.path, d.location.line, d.message) for d in version_findings(report, project.name)]
    assert wrong == []
    if project.name not in UNREAD_DECLARATION:  # each file is judged as Keras 2, from its project's declaration
        assert {t.keras_major for t in report.targets.values()} == {2}


def test_the_repro_corpus_would_fail_against_the_installed_environment(monkeypatch):
    """The test above can fail: judged against TF 2.21 itself, the same files get MP103."""
    monkeypatch.chdir(REPRO[0].parent)
    config = Config()
    config.target_tensorflow = "==2.21.*"
    report = check_paths([Path(".")], config)
    assert sum(d.code == "MP103" for d in report.diagnostics) >= 10


def test_manifest_lists_at_least_twenty_licensed_files():
    assert len(MANIFEST) >= 20
    for entry in MANIFEST:
        assert entry["licence"] in ("Apache-2.0", "BSD-3-Clause", "MIT"), entry["slug"]
        assert entry["url"].startswith(f"https://github.com/{entry['repository']}/blob/{entry['commit']}/")
        assert entry["declarations"], entry["slug"]
        assert licence_kept(entry), entry["slug"]


def licence_kept(entry) -> bool:
    """The licence of the file's model directory (or repository) is in tests/data/licences, or the file carries its
    own Apache-2.0 header (two NVIDIA models have no LICENSE of their own) and the licence text is there."""
    prefix = "__".join(entry["repository"].split("/") + entry["root"].split("/"))
    if entry["repository"] == "google/automl":
        prefix = "google__automl"
    if any(LICENCES.glob(f"{prefix}__LICENSE*")):
        return True
    header = (CORPUS / "files" / entry["slug"] / entry["path"]).read_text(encoding="utf-8")[:2000]
    return "Licensed under the Apache License, Version 2.0" in header and (LICENCES / "Apache-2.0.txt").is_file()


def test_real_corpus(monkeypatch, tmp_path):
    """Each file checked from a copy of its slug directory, marked as its project's root (git cannot hold the `.git`
    marker itself), with the declaration files of its repository beside it."""
    wrong = []
    for entry in MANIFEST:
        project = tmp_path / entry["slug"]
        shutil.copytree(CORPUS / "files" / entry["slug"], project)
        (project / ".git").touch()
        assert hashlib.sha256((project / entry["path"]).read_bytes()).hexdigest() == entry["sha256"], entry["slug"]
        assert all((project / declaration).is_file() for declaration in entry["declarations"]), entry["slug"]
        report = findings(project, monkeypatch, [Path(entry["path"])])
        assert not report.errors, entry["slug"]
        wrong += [(entry["slug"], d.code, d.location.line) for d in version_findings(report, entry["slug"])]
    assert wrong == []
