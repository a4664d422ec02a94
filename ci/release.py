"""Cut a release: the version in its one place (mpdoctor/_version.py, which pyproject.toml reads), CHANGELOG.md's
[Unreleased] moved under a dated `## [X.Y.Z] - YYYY-MM-DD` heading (an empty [Unreleased] above it), the README's and
docs' pre-commit `rev:` and Action `uses: mpdoctor/mpdoctor@` snippets moved to the new tag, one commit, and the
annotated tag `vX.Y.Z` those snippets name. Nothing is pushed: the last line says what to push.

    python ci/release.py 0.2.0 --dry-run   # the changes as a diff and the git commands; nothing written
    python ci/release.py 0.2.0             # commit and tag (the working tree must be clean)

The first release may keep the current version (0.1.0 is untagged); any later one must be greater than the last.
Standard library only. tests/test_release.py runs it on temporary clones.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VERSION_FILE = "mpdoctor/_version.py"
CHANGELOG = "CHANGELOG.md"
# The files whose snippets name the release tag (tests/test_precommit.py and tests/test_github_action.py hold them to
# the version).
SNIPPETS = ("README.md", "docs/integrations.md")
UNRELEASED = "## [Unreleased]\n"


class ReleaseError(Exception):
    """Why the release cannot be cut, in one line."""


@dataclass(frozen=True)
class Change:
    path: str
    old: str
    new: str

    def diff(self) -> str:
        lines = difflib.unified_diff(
            self.old.splitlines(keepends=True), self.new.splitlines(keepends=True), f"a/{self.path}", f"b/{self.path}"
        )
        return "".join(lines)


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        raise ReleaseError(f"git {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def parse_version(text: str) -> tuple[int, int, int]:
    match = re.fullmatch(r"(\d{1,6})\.(\d{1,6})\.(\d{1,6})", text)
    if match is None:
        raise ReleaseError(f"{text!r}: a release version is X.Y.Z (three numbers)")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def current_version(repo: Path) -> str:
    match = re.search(r'^__version__ = "([^"]+)"$', (repo / VERSION_FILE).read_text(encoding="utf-8"), re.M)
    if match is None:
        raise ReleaseError(f'{VERSION_FILE}: no `__version__ = "X.Y.Z"` line')
    return match.group(1)


def check_releasable(repo: Path, version: str, current: str) -> None:
    """The working tree is clean, the tag is new, and the version moves forward (or is the first, untagged one)."""
    if git(repo, "status", "--porcelain", "--untracked-files=no").strip():
        raise ReleaseError("the working tree has uncommitted changes: commit or stash them first")
    if git(repo, "tag", "--list", f"v{version}").strip():
        raise ReleaseError(f"tag v{version} exists already")
    first_release = not git(repo, "tag", "--list", f"v{current}").strip()
    if parse_version(version) < parse_version(current) or (version == current and not first_release):
        raise ReleaseError(f"{version} does not follow the current version {current} (tagged v{current})")


def version_change(repo: Path, version: str) -> Change:
    old = (repo / VERSION_FILE).read_text(encoding="utf-8")
    new = re.sub(r'^__version__ = "[^"]+"$', f'__version__ = "{version}"', old, count=1, flags=re.M)
    return Change(VERSION_FILE, old, new)


def changelog_change(repo: Path, version: str, date: str) -> Change:
    """[Unreleased]'s entries under `## [version] - date`; [Unreleased] stays, empty, for the next changes."""
    old = (repo / CHANGELOG).read_text(encoding="utf-8")
    if old.count(UNRELEASED) != 1:
        raise ReleaseError(f"{CHANGELOG}: no single `## [Unreleased]` heading")
    head, rest = old.split(UNRELEASED, 1)
    entries = rest.split("\n## [", 1)[0]
    if not re.search(r"^- ", entries, re.M):
        raise ReleaseError(f"{CHANGELOG}: [Unreleased] lists no change to release")
    new = f"{head}{UNRELEASED}\n## [{version}] - {date}\n{rest}"
    return Change(CHANGELOG, old, new)


def snippet_changes(repo: Path, version: str, current: str) -> list[Change]:
    """The pre-commit `rev:` and the Action's `@vX.Y.Z` in the docs' snippets: the tag being cut."""
    changes = []
    for path in SNIPPETS:
        old = (repo / path).read_text(encoding="utf-8")
        new = re.sub(rf"(rev: |uses: mpdoctor/mpdoctor@)v{re.escape(current)}\b", rf"\g<1>v{version}", old)
        if new != old:
            changes.append(Change(path, old, new))
    return changes


def plan(repo: Path, version: str, date: str) -> list[Change]:
    current = current_version(repo)
    parse_version(version)
    check_releasable(repo, version, current)
    changes = [version_change(repo, version), changelog_change(repo, version, date)]
    changes += snippet_changes(repo, version, current)
    return [change for change in changes if change.new != change.old]


def release(repo: Path, version: str, date: str, *, dry_run: bool) -> None:
    changes = plan(repo, version, date)
    commands = [
        ["git", "commit", "-m", f"Release v{version}", "--", *(c.path for c in changes)],
        ["git", "tag", "-a", f"v{version}", "-m", f"mpdoctor {version}"],
    ]
    if dry_run:
        for change in changes:
            sys.stdout.write(change.diff())
        for command in commands:
            print("would run: " + " ".join(command))
        return
    for change in changes:
        (repo / change.path).write_text(change.new, encoding="utf-8")
    for command in commands:
        git(repo, *command[1:])
    print(f"release: v{version} committed and tagged; publish it with: git push origin HEAD v{version}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ci/release.py", description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("version", help="the release, X.Y.Z")
    parser.add_argument("--date", default=datetime.date.today().isoformat(), help="the CHANGELOG date (default: today)")
    parser.add_argument("--dry-run", action="store_true", help="print the changes and commands; write nothing")
    parser.add_argument("--repo", type=Path, default=REPO, help="the repository (default: this one)")
    args = parser.parse_args(argv)
    try:
        datetime.date.fromisoformat(args.date)
    except ValueError:
        print(f"release: error: --date {args.date!r}: not a YYYY-MM-DD date", file=sys.stderr)
        return 2
    try:
        release(args.repo, args.version, args.date, dry_run=args.dry_run)
    except ReleaseError as exc:
        print(f"release: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
