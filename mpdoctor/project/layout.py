"""How the project's own tooling imports a file (issue 31), for the trace child: the project root and its package
roots (`src/` and the like, declared in pyproject.toml, setup.cfg or setup.py, as after `pip install -e .`) go on
sys.path, and a module inside a package is imported by its dotted name, as `python -m pkg.module` would, so its
relative imports work. Read without importing anything of the project."""

from __future__ import annotations

import configparser
import functools
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from mpdoctor.project.declared import project_toml
from mpdoctor.project.discovery import find_root, imports_of
from mpdoctor.project.requirements import read_project_file

_SETUP_PY_ROOT = re.compile(r"""package_dir\s*=\s*\{\s*(['"])\1\s*:\s*(['"])([^'"]+)\2""")
_SETUP_PY_WHERE = re.compile(r"""find(?:_namespace)?_packages\s*\(\s*(?:where\s*=\s*)?(['"])([^'"]+)\1""")
_RELATIVE_IMPORT = re.compile(r"^[ \t]*from[ \t]+\.", re.MULTILINE)


@dataclass(frozen=True)
class ImportLayout:
    root: str | None  # the project root (mpdoctor.project.discovery.find_root), None outside a project
    search_path: tuple[str, ...]  # directories the child puts on sys.path: package roots, then the project root
    module: str | None  # the dotted name to import the file by (inside a package), None: by its path


def layout_of(path: str) -> ImportLayout:
    file = os.path.realpath(path)
    found = find_root(Path(file))
    root = str(found) if found is not None else None
    search = (*package_roots(root), root) if root is not None else ()
    module = dotted_name(file, search)
    bases = _import_bases(file, root, search)
    if module is not None:  # its package tree's base: where `python -m` runs it from
        levels = module.count(".") + (os.path.basename(file) == "__init__.py")
        base = file
        for _ in range(levels + 1):
            base = os.path.dirname(base)
        bases.insert(0, base)
    return ImportLayout(root, tuple(dict.fromkeys((*search, *bases))), module)


def _import_bases(file: str, root: str | None, search: tuple[str, ...]) -> list[str]:
    """The directories between the file and the project root from which its absolute imports of the project's own
    modules resolve (`import official.utils` in official/legacy/train.py: a package tree laid out anywhere in the
    project, run with its base on PYTHONPATH as its README says), as the static project analysis resolves them."""
    text = read_project_file(Path(file)) if file.endswith(".py") else None
    if text is None or root is None:
        return []
    imports = imports_of(text)
    tops = {m.split(".")[0] for dots, m, _ in imports.froms if not dots and m} | {
        m.split(".")[0] for m in imports.plain
    }
    bases: list[str] = []
    for top in sorted(tops - set(sys.stdlib_module_names)):
        base = _base_holding(top, os.path.dirname(file), root)
        if base is not None and base not in search and base not in bases and base != os.path.dirname(file):
            bases.append(base)
    return bases


def _base_holding(top: str, start: str, root: str) -> str | None:
    """The nearest directory from `start` up to `root` holding a module or package named `top`."""
    directory = start
    while directory == root or directory.startswith(root + os.sep):
        if _holds(directory, top):
            return directory
        directory = os.path.dirname(directory)
    return None


def _holds(directory: str, top: str) -> bool:
    return os.path.isfile(os.path.join(directory, top + ".py")) or os.path.isdir(os.path.join(directory, top))


@functools.lru_cache(maxsize=64)
def package_roots(root: str) -> tuple[str, ...]:
    """The directories the project's packaging installs packages from, besides the root itself: what pyproject.toml
    (`[tool.setuptools] package-dir`, `packages.find where`, poetry's `from`), setup.cfg and setup.py declare, and a
    `src/` directory holding a package (the src layout every build backend knows)."""
    declared = [*_pyproject_roots(root), *_setup_cfg_roots(root), *_setup_py_roots(root)]
    src = os.path.join(root, "src")
    src_is_root = not os.path.isfile(os.path.join(src, "__init__.py"))  # else `src` is a package of the root
    if src_is_root and any(os.path.isfile(os.path.join(src, n, "__init__.py")) for n in _listdir(src)):
        declared.append("src")
    found: list[str] = []
    for relative in declared:
        directory = os.path.realpath(os.path.join(root, relative))
        if directory != root and os.path.isdir(directory) and directory not in found:
            found.append(directory)
    return tuple(found)


def dotted_name(file: str, search_path: tuple[str, ...]) -> str | None:
    """The name `python -m` would import `file` by: up through the directories holding an __init__.py (a regular
    package); a file with relative imports in a directory without one is a namespace package's module, named from
    the nearest search root above it. None for a top-level module or a name that is not importable."""
    if not file.endswith(".py"):
        return None
    directory = os.path.dirname(file)
    parts = [] if os.path.basename(file) == "__init__.py" else [os.path.basename(file)[:-3]]
    base = directory
    while os.path.isfile(os.path.join(base, "__init__.py")) and os.path.dirname(base) != base:
        parts.insert(0, os.path.basename(base))
        base = os.path.dirname(base)
    if base == directory and _has_relative_import(file):
        enclosing = [r for r in search_path if directory.startswith(r + os.sep)]
        if enclosing:
            base = max(enclosing, key=len)
            parts = [*os.path.relpath(directory, base).split(os.sep), *parts]
    if base == directory or not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


def is_own_module(name: str, layout: ImportLayout, file: str) -> bool:
    """Whether the top-level module of `name` is the project's own: a module or package in one of its roots or a
    directory from the file's up to the project root (a missing one is a bug of the project, not of the
    environment)."""
    top = name.split(".")[0]
    if any(_holds(place, top) for place in layout.search_path):
        return True
    start = os.path.dirname(os.path.realpath(file))
    return _holds(start, top) or (layout.root is not None and _base_holding(top, start, layout.root) is not None)


def _own_places(layout: ImportLayout, file: str) -> list[str]:
    """The project's roots and the directories from the file's up to the project root: where its modules live."""
    places = list(layout.search_path)
    directory = os.path.dirname(os.path.realpath(file))
    places.append(directory)
    root = layout.root
    while root is not None and directory.startswith(root + os.sep):
        directory = os.path.dirname(directory)
        places.append(directory)
    return list(dict.fromkeys(places))


def own_top_levels(layout: ImportLayout, file: str) -> tuple[str, ...]:
    """Every top-level name `is_own_module` holds the project's own, for the trace child (which may not import
    this module): the modules and packages of the roots and of the directories from the file's up to the root."""
    names: dict[str, None] = {}
    for place in _own_places(layout, file):
        for entry in _listdir(place):
            name = entry[:-3] if entry.endswith(".py") else entry
            if name.isidentifier() and (entry.endswith(".py") or os.path.isdir(os.path.join(place, entry))):
                names[name] = None
    return tuple(names)


def unbuilt_extension(name: str, layout: ImportLayout, file: str) -> str | None:
    """The Cython source (`pkg/mod.pyx`) of the project's own module `name` when that module is missing: an
    extension the environment has not built (`pip install -e .`, `setup.py build_ext --inplace`), not a bug."""
    relative = name.replace(".", os.sep) + ".pyx"
    for place in _own_places(layout, file):
        source = os.path.join(place, relative)
        if os.path.isfile(source):
            return source
    return None


def is_installed(name: str) -> bool:
    """Whether the top-level module of `name` can be found in this interpreter (without importing it)."""
    top = name.split(".")[0]
    if top in sys.builtin_module_names or top in sys.stdlib_module_names:
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _has_relative_import(file: str) -> bool:
    text = read_project_file(Path(file))
    return text is not None and _RELATIVE_IMPORT.search(text) is not None


def _listdir(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _pyproject_roots(root: str) -> list[str]:
    data = project_toml(Path(root, "pyproject.toml")) or {}
    tool = _table(data, "tool")
    setuptools = _table(tool, "setuptools")
    found: list[str] = []
    package_dir = setuptools.get("package-dir")
    if isinstance(package_dir, dict) and isinstance(package_dir.get(""), str):
        found.append(package_dir[""])
    where = _table(_table(setuptools, "packages"), "find").get("where")
    if isinstance(where, str):
        where = [where]
    found += [w for w in where or () if isinstance(w, str)]
    poetry_packages = _table(tool, "poetry").get("packages")
    for entry in poetry_packages if isinstance(poetry_packages, list) else ():
        if isinstance(entry, dict) and isinstance(entry.get("from"), str):
            found.append(entry["from"])
    return found


def _table(data: dict, key: str) -> dict:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _setup_cfg_roots(root: str) -> list[str]:
    text = read_project_file(Path(root, "setup.cfg"))
    if text is None:
        return []
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return []
    found = []
    if parser.has_option("options", "package_dir"):
        for line in parser.get("options", "package_dir").splitlines():
            key, _, value = line.partition("=")
            if value.strip() and not key.strip():
                found.append(value.strip())
    if parser.has_option("options.packages.find", "where"):
        found.append(parser.get("options.packages.find", "where").strip())
    return found


def _setup_py_roots(root: str) -> list[str]:
    text = read_project_file(Path(root, "setup.py"))
    if text is None:
        return []
    return [m.group(3) for m in _SETUP_PY_ROOT.finditer(text)] + [m.group(2) for m in _SETUP_PY_WHERE.finditer(text)]


_NOT_MODEL_FILES = {
    "setup.py": "a packaging script",
    "conftest.py": "pytest configuration",
    "noxfile.py": "nox sessions",
}
_PACKAGING = re.compile(r"^[ \t]*(?:from|import)[ \t]+(?:setuptools|distutils)\b", re.MULTILINE)
_NOT_MODEL_DIRS = {"docs": "documentation", "migrations": "a migration"}
_TEST_DIRS = {"tests", "test"}


def not_model_code(path: str) -> str | None:
    """Why the trace does not run `path` as model code (the static pass still checks it), None when it does:
    packaging and tooling scripts (setup.py parses sys.argv and exits), documentation, migrations, and test modules
    under a tests/ directory (pytest runs those, with its fixtures)."""
    file = os.path.realpath(path)
    name = os.path.basename(file)
    if name in _NOT_MODEL_FILES and (name != "setup.py" or _is_packaging(file)):
        return _NOT_MODEL_FILES[name]
    root = find_root(Path(file))
    parts = os.path.relpath(os.path.dirname(file), root).split(os.sep) if root is not None else []
    for part in parts:
        if part in _NOT_MODEL_DIRS:
            return _NOT_MODEL_DIRS[part]
    if _TEST_DIRS.intersection(parts) and (name.startswith("test_") or name.endswith("_test.py")):
        return "a test module"
    return None


def _is_packaging(file: str) -> bool:
    """A setup.py that imports setuptools or distutils (NVIDIA's utils/setup.py configures the run: model code)."""
    text = read_project_file(Path(file))
    return text is not None and _PACKAGING.search(text) is not None
