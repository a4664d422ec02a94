"""Put the wild corpus's files in place: each file of sources.json, read at its pinned commit from a local clone of
its repository, checked against its sha256, written to tests/data/wild/files/ (ignored by git).

    python tests/data/wild/collect.py CLONES_DIR

CLONES_DIR holds one git clone (or bare mirror) per repository, named `owner+name` or `owner/name`, each with
`.git` or `repo/` inside or being the git directory itself. Nothing is downloaded: a repository without a clone is
listed and skipped, and the corpus test checks the files that are present.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
TARGET = HERE / "files"


def git_dir(clones: Path, repository: str) -> Path | None:
    owner, name = repository.split("/")
    for base in (clones / f"{owner}+{name}", clones / owner / name):
        for candidate in (base / "repo", base / ".git", base):
            if (candidate / "HEAD").is_file() or (candidate / ".git").exists():
                return candidate
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    clones = Path(argv[0])
    TARGET.mkdir(exist_ok=True)
    missing, bad = [], []
    for source in json.loads((HERE / "sources.json").read_text()):
        repo = git_dir(clones, source["repository"])
        if repo is None:
            missing.append(source["repository"])
            continue
        shown = subprocess.run(
            ["git", "--git-dir" if not (repo / ".git").exists() else "-C", str(repo), "show",
             f"{source['commit']}:{source['path']}"],
            capture_output=True,
        )
        if shown.returncode != 0 or hashlib.sha256(shown.stdout).hexdigest() != source["sha256"]:
            bad.append(f"{source['repository']}:{source['path']}@{source['commit'][:10]}")
            continue
        (TARGET / source["file"]).write_bytes(shown.stdout)
    for repository in sorted(set(missing)):
        print(f"no clone of {repository} in {clones}", file=sys.stderr)
    for item in bad:
        print(f"not at the pinned commit or changed: {item}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
