"""The project analyses of one run: which project each checked path belongs to, one analysis per project root, and
what the per-file pass gets from them (each file's policy contexts, the trees already parsed)."""

from __future__ import annotations

import ast
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mpdoctor.project.discovery import TEXTS, find_root, is_test_module, select
from mpdoctor.static.policy_context import FileContexts

if TYPE_CHECKING:
    from mpdoctor.project.analysis import Builder, Project


@dataclass
class Projects:
    projects: list[Project] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # for --verbose: what was analysed, what fell back and why
    texts: dict[str, str] = field(default_factory=dict)  # checked files the scans read and no analysis parsed

    def contexts_for(self, path: Path) -> FileContexts | None:
        key = real_path(path)
        for project in self.projects:
            found = project.file_contexts(key)
            if found is not None:
                return found
        return None

    def take_source(self, path: Path) -> tuple[str, ast.Module | None] | None:
        """The text of `path` if the scans read it, with its tree if an analysis parsed it (handed over once: the
        per-file pass need not read the file again)."""
        key = real_path(path)
        for project in self.projects:
            found = project.take_source(key)
            if found is not None:
                return found
        text = self.texts.pop(key, None)
        return None if text is None else (text, None)

    @property
    def builders(self) -> list[Builder]:
        return [b for project in self.projects for b in project.builders]


@functools.lru_cache(maxsize=4096)
def _real_directory(directory: str) -> str:
    return os.path.realpath(directory)


def real_path(path) -> str:
    """The file's path with its directory's symlinks resolved (once per directory: realpath per file is slow)."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(_real_directory(directory), name)


def analyse_projects(
    paths: list[Path], files: list[Path], excluded: Callable[[str], bool], shown: Callable[[str], str]
) -> Projects:
    """One analysis per project root of the checked `paths` (the files collected from them are `files`);
    `excluded(path)`: the configuration excludes that file or directory."""
    result = Projects()
    roots = _project_roots(paths, result.notes)
    for root, checked in _checked_by_root(roots, files).items():
        if not checked:
            continue
        selected = select(Path(root), checked, roots[root], excluded)
        if selected is None:
            _keep_texts(result, checked)
            result.notes.append(
                f"project {shown(root) or '.'}: no entry point that sets a dtype policy imports the modules "
                "checked: checked file by file"
            )
            continue
        from mpdoctor.project.analysis import analyse  # only here: most runs find no project to analyse

        project = analyse(selected, set(checked), shown)
        _keep_texts(result, checked)
        result.projects.append(project)
        entries = ", ".join(shown(e) for e in selected.entries[:5]) + (", ..." if len(selected.entries) > 5 else "")
        result.notes.append(
            f"project {shown(root) or '.'}: {len(selected.files)} modules; {len(selected.entries)} entry "
            f"point(s) that set a policy ({entries}); {project.parsed} parsed; {len(project.builders)} model "
            f"builder(s) reached, {sum(1 for b in project.builders if b.across_modules)} from another module"
        )
        result.notes += project.notes
    return result


def _project_roots(paths: list[Path], notes: list[str]) -> dict[str, bool]:
    """The project root of each checked path -> whether the user named a test file or directory in it (paths in no
    project, or that cannot be resolved, are noted)."""
    roots: dict[str, bool] = {}
    for path in paths:
        try:
            root = find_root(path)
            probe = path.resolve() if path.is_file() else path.resolve() / "__probe__.py"
        except (OSError, RuntimeError):  # a symlink loop, a folder we may not search: already an error of its own
            notes.append(f"{path}: cannot be resolved: checked file by file")
            continue
        if root is None:
            notes.append(
                f"{path}: not inside a project (no pyproject.toml, setup.cfg, setup.py or .git above it): "
                "checked file by file"
            )
            continue
        named_tests = probe != root / "__probe__.py" and is_test_module(str(probe), str(root))
        roots[str(root)] = roots.get(str(root), False) or named_tests
    return roots


def _checked_by_root(roots: dict[str, bool], files: list[Path]) -> dict[str, list[str]]:
    """The checked Python files (real paths) of each project root, a file in nested projects going to the inner."""
    checked_by_root: dict[str, list[str]] = {root: [] for root in roots}
    for file in files:
        absolute = os.path.abspath(file)
        owners = [root for root in roots if absolute.startswith(root + os.sep)]
        if owners and file.suffix == ".py":
            checked_by_root[max(owners, key=len)].append(real_path(absolute))
    return checked_by_root


def _keep_texts(result: Projects, checked: list[str]) -> None:
    """Keep what the scans read of the checked files for the per-file pass; forget the rest of the project."""
    result.texts.update((path, TEXTS[path]) for path in checked if path in TEXTS)
    TEXTS.clear()
