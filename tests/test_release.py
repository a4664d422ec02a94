"""The release procedure (issue 33): ci/release.py on temporary clones of this repository, never on it. A dry run
changes nothing and shows what a release would; a release bumps the version in its one place, dates the CHANGELOG's
[Unreleased] entries, moves the docs' snippets to the new tag, commits and creates that tag; what cannot be released
is one line and exit 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "ci" / "release.py"
IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ, **IDENTITY)
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env).stdout


def release(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **IDENTITY)
    command = [sys.executable, str(SCRIPT), "--repo", str(repo), "--date", "2026-12-03", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def version_of(repo: Path) -> str:
    return re.search(r'__version__ = "([^"]+)"', (repo / "mpdoctor/_version.py").read_text()).group(1)


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A clone of this repository's committed tree, with a CHANGELOG entry under [Unreleased] and the release tags
    of this repository (none yet, or some)."""
    repo = tmp_path / "mpdoctor"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True, timeout=300)
    changelog = repo / "CHANGELOG.md"
    if not re.search(r"## \[Unreleased\]\n+### \w+\n- ", changelog.read_text()):  # just after a release
        changelog.write_text(changelog.read_text().replace("## [Unreleased]\n", "## [Unreleased]\n\n### Fixed\n- x\n"))
        git(repo, "commit", "-qam", "an unreleased change")
    return repo


def next_minor(version: str) -> str:
    major, minor, _ = version.split(".")
    return f"{major}.{int(minor) + 1}.0"


def test_a_dry_run_shows_the_release_and_changes_nothing(clone):
    version = next_minor(version_of(clone))
    head = git(clone, "rev-parse", "HEAD")
    result = release(clone, version, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert f'+__version__ = "{version}"' in result.stdout
    assert f"+## [{version}] - 2026-12-03" in result.stdout
    assert f"+    rev: v{version}" in result.stdout and f"uses: mpdoctor/mpdoctor@v{version}" in result.stdout
    assert f"would run: git tag -a v{version} -m mpdoctor {version}" in result.stdout
    assert git(clone, "status", "--porcelain") == "" and git(clone, "rev-parse", "HEAD") == head
    assert git(clone, "tag", "--list", f"v{version}") == ""


def test_a_release_bumps_the_version_dates_the_changelog_and_tags_what_the_snippets_name(clone):
    old = version_of(clone)
    version = next_minor(old)
    unreleased = (clone / "CHANGELOG.md").read_text().split("## [Unreleased]\n", 1)[1].split("\n## [", 1)[0]
    result = release(clone, version)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(f"git push origin HEAD v{version}")
    assert version_of(clone) == version
    changelog = (clone / "CHANGELOG.md").read_text()
    # [Unreleased] stays for the next changes, empty; its entries are the release's.
    assert f"## [Unreleased]\n\n## [{version}] - 2026-12-03\n{unreleased}" in changelog
    for doc in ("README.md", "docs/integrations.md"):
        text = (clone / doc).read_text()
        assert f"rev: v{version}" in text and f"uses: mpdoctor/mpdoctor@v{version}" in text
        assert f"v{old}" not in text
    # One commit with all of it, and the annotated tag on it; the tree is clean.
    assert git(clone, "log", "-1", "--format=%s") == f"Release v{version}\n"
    assert git(clone, "rev-parse", f"v{version}^{{commit}}") == git(clone, "rev-parse", "HEAD")
    assert git(clone, "cat-file", "-t", f"v{version}") == "tag\n"
    assert git(clone, "status", "--porcelain", "--untracked-files=no") == ""
    # The same version again: refused, the tag exists.
    again = release(clone, version)
    assert again.returncode == 2 and again.stderr == f"release: error: tag v{version} exists already\n"
    # The next release needs changes under [Unreleased].
    empty = release(clone, next_minor(version))
    assert empty.returncode == 2
    assert empty.stderr == "release: error: CHANGELOG.md: [Unreleased] lists no change to release\n"


def test_the_first_release_may_keep_the_untagged_version(clone):
    version = version_of(clone)
    if git(clone, "tag", "--list", f"v{version}"):
        pytest.skip(f"v{version} is released already")
    result = release(clone, version, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert f"would run: git tag -a v{version}" in result.stdout and "__version__" not in result.stdout


@pytest.mark.parametrize(
    "arguments,error",
    [
        (["1.2"], "'1.2': a release version is X.Y.Z (three numbers)"),
        (["0.0.1"], "0.0.1 does not follow the current version"),
        (["9.0.0", "--date", "03/12/2026"], "--date '03/12/2026': not a YYYY-MM-DD date"),
    ],
)
def test_what_cannot_be_released_is_one_line_and_exit_2(clone, arguments, error):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--repo", str(clone), *arguments], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2 and result.stderr.startswith(f"release: error: {error}"), result.stderr
    assert result.stderr.count("\n") == 1


def test_uncommitted_changes_are_refused(clone):
    (clone / "README.md").write_text((clone / "README.md").read_text() + "\nlocal edit\n")
    result = release(clone, next_minor(version_of(clone)))
    assert result.returncode == 2
    assert result.stderr == "release: error: the working tree has uncommitted changes: commit or stash them first\n"
    assert git(clone, "status", "--porcelain", "--untracked-files=no") == " M README.md\n"  # nothing else written
