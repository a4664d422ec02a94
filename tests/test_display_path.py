"""Paths in reports: relative to the working directory when inside it (as ruff and mypy show them), as given when
outside. engine.display_path does with string work what os.path.relpath did: the same text for every form."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mpdoctor.engine import display_path


def by_relpath(path) -> str:
    """What display_path returned when it called relpath."""
    try:
        shown = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if shown.startswith("..") else shown


def forms(cwd: str) -> list:
    relative = ["a.py", "./a.py", "a/../b.py", "..x/a.py", ".", "..", "pkg/./m.py", "a//b.py", "../../x", "../b/c.py"]
    absolute = [cwd, cwd + "/", cwd + "/a.py", cwd + "//x/../y.py", cwd + "x/a.py", cwd + "/..", cwd + "/a/./b/../c.py"]
    elsewhere = ["/", "/a.py", "/tmp/../x.py", "//a", "//x/y.py", "///x/y.py", "/" + os.path.basename(cwd) + "/z.py"]
    return [*relative, *absolute, *elsewhere, Path("pkg/a.py"), Path(cwd) / "a.py"]


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_the_same_text_as_relpath_in_and_outside_cwd(tmp_path, monkeypatch, depth):
    cwd = Path("/") if depth == 0 else tmp_path if depth == 1 else tmp_path / "b"
    cwd.mkdir(exist_ok=True)
    monkeypatch.chdir(cwd)
    for path in forms(os.getcwd()):
        assert display_path(path) == by_relpath(path), path
