"""Where a project analysis starts, found without parsing: the project root, every module under it, their imports
(read with a regular expression), and from those the entry points: modules that import other project modules and
can reach both a policy setter and a checked file.

Reading every file of a big tree costs a fraction of parsing it; the analysis then parses only the modules its walk
from the entry points visits (the per-file pass reuses those trees). What a file says is cached by (path, mtime,
size) for the life of the process.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mpdoctor.notebook import NotebookError, is_notebook, read_notebook
from mpdoctor.sources import read_source

ROOT_MARKERS = ("pyproject.toml", "setup.cfg", "setup.py", ".git")
# A module that mentions none of these sets no policy (the analysis resolves the real calls later). Substring tests:
# a regular expression with alternatives is ten times slower on a big tree.
_SETTER_WORDS = ("set_global_policy", "set_dtype_policy", "set_policy", "set_floatx")
_FLAG_WORDS = ("DEFINE_", "add_argument")
_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(?P<dots>\.*)(?P<module>[\w.]*)[ \t]+import[ \t]+(?P<names>\([^)]*\)|[^\n#;]*)"
    r"|import[ \t]+(?P<plain>[^\n#;]+))",
    re.MULTILINE,
)
_TEST_DIRS = {"tests", "test", "testing"}
_MAX_FILES = 50_000  # a "project" beyond this is a home directory or a mount: no project analysis


@dataclass(frozen=True)
class Imports:
    """What a module imports: (dots, module, names) of each `from` import, and the modules of plain imports."""

    froms: tuple[tuple[int, str, tuple[str, ...]], ...]
    plain: tuple[str, ...]


@dataclass(frozen=True)
class Scan:
    imports: Imports
    sets_policy: bool  # mentions a policy setter
    defines_flags: bool  # mentions absl DEFINE_* or argparse add_argument


_CACHE: dict[str, tuple[int, int, Scan]] = {}
# Texts read by the scans of the current run, for the analysis to parse without reading them again (cleared by
# `select` once the analysis is done with them: only one run's worth is ever kept).
TEXTS: dict[str, str] = {}


def find_root(path: Path) -> Path | None:
    """The project a checked path belongs to: the nearest directory (itself or above) holding pyproject.toml,
    setup.cfg, setup.py or .git; a checked directory without one is its own project; a file outside any is not in
    a project."""
    path = path.resolve()
    start = path if path.is_dir() else path.parent
    for directory in [start, *start.parents]:
        if any((directory / marker).exists() for marker in ROOT_MARKERS):
            return directory
    return start if path.is_dir() else None


class Excluder:
    """The configuration's `exclude` patterns (mpdoctor.config) on path strings, for a walk that prunes excluded
    directories: a pattern without "/" matches a path component (only the new one needs testing), one with "/"
    the path relative to the configuration's root. Same answers as Config.is_excluded, without pathlib."""

    def __init__(self, base: Path, patterns: Iterable[str]) -> None:
        self.base = os.path.realpath(base)
        patterns = [p.rstrip("/") for p in patterns]
        names = [p for p in patterns if "/" not in p]
        self.names = re.compile("|".join(fnmatch.translate(p) for p in names)) if names else None
        self.paths = [p for p in patterns if "/" in p]

    def __call__(self, path: str) -> bool:
        if self.names is not None and self.names.match(os.path.basename(path)):
            return True
        if not self.paths:
            return False
        rel = os.path.relpath(path, self.base).replace(os.sep, "/")
        return any(
            fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(rel, p + "/*") or rel.startswith(p + "/") for p in self.paths
        )


def project_modules(root: str, excluded: Callable[[str], bool]) -> list[str] | None:
    """Every .py file under `root` (absolute paths) that the configuration does not exclude, and every notebook
    (an entry point: it runs the project's modules, nothing imports it); None when there are too many to be a
    project."""
    found: list[str] = []
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not excluded(os.path.join(directory, d)))
        found += [
            path
            for path in (os.path.join(directory, n) for n in sorted(names) if n.endswith((".py", ".ipynb")))
            if not excluded(path)
        ]
        if len(found) > _MAX_FILES:
            return None
    return found


def scan(path: str, mtime_ns: int, size: int) -> Scan | None:
    """What `path` (of this modification time and size) imports and whether it may set a policy or define flags
    (None: unreadable)."""
    cached = _CACHE.get(path)
    if cached is not None and cached[:2] == (mtime_ns, size):
        return cached[2]
    try:
        text = read_notebook(Path(path)).source if is_notebook(path) else read_source(path)
    except (OSError, UnicodeDecodeError, SyntaxError, NotebookError):
        return None
    TEXTS[path] = text
    result = Scan(
        _imports(text),
        any(word in text for word in _SETTER_WORDS),
        any(word in text for word in _FLAG_WORDS),
    )
    if len(_CACHE) > 200_000:
        _CACHE.clear()
    _CACHE[path] = (mtime_ns, size, result)
    return result


def _import_statements(text: str) -> Iterator[re.Match]:
    """`_IMPORT.finditer(text)`, tried only at the start of lines that contain "import" (every match does): the
    engine does not skip to line starts by itself and tried every position of the file, a third of a big tree's
    scan."""
    end = 0  # of the last match: a line inside it (a parenthesised name list) starts no statement
    position = text.find("import")
    while position != -1:
        start = text.rfind("\n", 0, position) + 1
        if start >= end:
            match = _IMPORT.match(text, start)
            if match is not None:
                yield match
                end = match.end()
        next_line = text.find("\n", position)
        if next_line == -1:
            break
        position = text.find("import", max(next_line, end))


def imports_of(text: str) -> Imports:
    """What a module's text imports (a regular expression, no parse)."""
    return _imports(text)


def _imports(text: str) -> Imports:
    froms = []
    plain: list[str] = []
    if "import" not in text:
        return Imports((), ())
    for match in _import_statements(text):
        if match["plain"] is not None:
            plain += [part.split(" as ")[0].strip() for part in match["plain"].split(",")]
            continue
        names = match["names"].strip("() \t\n\\")
        froms.append(
            (
                len(match["dots"]),
                match["module"],
                tuple(n.split(" as ")[0].strip() for n in names.replace("\n", " ").split(",") if n.strip()),
            )
        )
    return Imports(tuple(froms), tuple(p for p in plain if p))


class ModuleResolver:
    """Finds the project file an import names (absolute path strings: pathlib is too slow for a big tree). An
    absolute import is looked up from the importing file's directory upwards to the root (a script's directory is
    on sys.path; so is the root of a package tree laid out anywhere in the project), then in `src/`."""

    def __init__(self, root: str, files: Iterable[str]) -> None:
        self.root = root
        self.files = set(files)
        self.directories: set[str] = set()
        for file in self.files:
            directory = os.path.dirname(file)
            while directory not in self.directories and len(directory) >= len(root):
                self.directories.add(directory)
                directory = os.path.dirname(directory)
        self._cache: dict[tuple[str, str], str | None] = {}
        self._bases_cache: dict[str, list[str]] = {}
        # What an absolute import's first component must be to name anything here: a module or directory name
        # (`import tensorflow` in every file of a big tree is then answered without a lookup per base).
        self._top_names = {os.path.basename(path).removesuffix(".py") for path in (*self.files, *self.directories)}

    def module(self, importer: str, dots: int, dotted: str) -> str | None:
        """The file (module.py or package/__init__.py) or namespace directory `dotted` names, or None."""
        if dots:
            base = os.path.dirname(importer)
            for _ in range(dots - 1):
                base = os.path.dirname(base)
            return self.child(base, dotted) if dotted else base
        if dotted.partition(".")[0] not in self._top_names:
            return None
        for base in self._bases(os.path.dirname(importer)):
            found = self.child(base, dotted)
            if found is not None:
                return found
        return None

    def _bases(self, start: str) -> list[str]:
        bases = self._bases_cache.get(start)
        if bases is None:
            bases = []
            directory = start
            while True:
                bases.append(directory)
                parent = os.path.dirname(directory)
                if directory == self.root or parent == directory or len(parent) < len(self.root):
                    break
                directory = parent
            src = os.path.join(self.root, "src")
            if src in self.directories:
                bases.append(src)
            self._bases_cache[start] = bases
        return bases

    def child(self, base: str, dotted: str) -> str | None:
        key = (base, dotted)
        if key not in self._cache:
            target = os.path.join(base, *dotted.split("."))
            if target + ".py" in self.files:
                self._cache[key] = target + ".py"
            elif os.path.join(target, "__init__.py") in self.files:
                self._cache[key] = os.path.join(target, "__init__.py")
            elif target in self.directories:
                self._cache[key] = target  # a namespace package
            else:
                self._cache[key] = None
        return self._cache[key]

    @staticmethod
    def package_of(target: str) -> str | None:
        """The directory whose submodules `from target import name` may name (None for a plain module)."""
        if target.endswith("__init__.py"):
            return os.path.dirname(target)
        return None if target.endswith(".py") else target

    def edges(self, importer: str, imports: Imports) -> set[str]:
        """The project files an import list may load (a package's `__init__.py` and the submodules named)."""
        found: set[str] = set()
        for dots, module, names in imports.froms:
            target = self.module(importer, dots, module)
            if target is None:
                continue
            if target.endswith(".py"):
                found.add(target)
            package = self.package_of(target)
            if package is not None:
                for name in names:
                    sub = self.child(package, name) if name != "*" else None
                    if sub is not None and sub.endswith(".py"):
                        found.add(sub)
        for dotted in imports.plain:
            parts = dotted.split(".")
            for i in range(1, len(parts) + 1):  # `import a.b.c` loads a, a.b and a.b.c
                target = self.module(importer, 0, ".".join(parts[:i]))
                if target is not None and target.endswith(".py"):
                    found.add(target)
        return found


def is_test_module(path: str, root: str) -> bool:
    """tests/, test_*.py, *_test.py and conftest.py: code that runs under pytest, not an entry point."""
    relative = os.path.relpath(path, root)
    parts = relative.split(os.sep)
    name = parts[-1]
    return (
        any(p in _TEST_DIRS for p in parts[:-1])
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


@dataclass
class ProjectFiles:
    root: str
    files: list[str]  # every module of the project
    entries: list[str]  # modules whose imports can reach a policy setter and a checked file (the analysis starts there)
    setters: set[str]
    flag_files: set[str]


@dataclass
class _Graph:
    """The import graph of a project as the scan found it (cached while no file changes)."""

    signature: tuple
    files: list[str]
    graph: dict[str, set[str]]
    reverse: dict[str, set[str]]
    setters: set[str]
    flag_files: set[str]


_GRAPHS: dict[str, _Graph] = {}
ImportGraph = _Graph
_RUN_GRAPHS: dict[tuple[str, int], _Graph | None] = {}


def import_graph(root: str, excluded: Callable[[str], bool], generation: int) -> ImportGraph | None:
    """The import graph of the project at `root`, scanned once per run (`generation`: mpdoctor.project.target's),
    None for a tree too big to be a project."""
    key = (root, generation)
    if key not in _RUN_GRAPHS:
        if len(_RUN_GRAPHS) > 16:
            _RUN_GRAPHS.clear()
        _RUN_GRAPHS[key] = _graph(root, excluded)
    return _RUN_GRAPHS[key]


def _graph(root: str, excluded: Callable[[str], bool]) -> _Graph | None:
    files = project_modules(root, excluded)
    if files is None:
        return None
    stats = []
    for path in files:
        try:
            stat = os.stat(path)
        except OSError:
            continue
        stats.append((path, stat.st_mtime_ns, stat.st_size))
    signature = tuple(stats)
    cached = _GRAPHS.get(root)
    if cached is not None and cached.signature == signature:
        return cached
    scans = {}
    for path, mtime_ns, size in stats:
        found = scan(path, mtime_ns, size)
        if found is not None:
            scans[path] = found
    resolver = ModuleResolver(root, scans)
    graph = {path: resolver.edges(path, result.imports) for path, result in scans.items()}
    reverse: dict[str, set[str]] = {}
    for source, targets in graph.items():
        for target in targets:
            reverse.setdefault(target, set()).add(source)
    result = _Graph(
        signature,
        list(scans),
        graph,
        reverse,
        {p for p, s in scans.items() if s.sets_policy},
        {p for p, s in scans.items() if s.defines_flags},
    )
    if len(_GRAPHS) > 16:
        _GRAPHS.clear()
    _GRAPHS[root] = result
    return result


def select(root: Path, checked: list[str], named_tests: bool, excluded: Callable[[str], bool]) -> ProjectFiles | None:
    """The files the project analysis of `root` parses for the `checked` files; None when no entry point that sets a
    policy reaches any of them (nothing to add to the per-file pass)."""
    root_text = str(root)
    found = _graph(root_text, excluded)
    if found is None or not found.setters:
        return None
    reaches_setter = closure(found.setters, found.reverse)
    reaches_checked = closure([c for c in checked if c in found.graph], found.reverse)
    # A script that imports nothing of the project passes its policy to no other module: its own per-file
    # analysis says everything (and big trees of standalone scripts cost nothing here).
    entries = sorted(
        p
        for p in reaches_setter & reaches_checked
        if found.graph[p] and (named_tests or not is_test_module(p, root_text))
    )
    if not entries:
        return None
    return ProjectFiles(
        root=root_text, files=found.files, entries=entries, setters=found.setters, flag_files=found.flag_files
    )


def closure(start: Iterable[str], edges: dict[str, set[str]]) -> set[str]:
    """`start` and every node `edges` reach from it."""
    seen = set(start)
    stack = list(seen)
    while stack:
        for nxt in edges.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen
