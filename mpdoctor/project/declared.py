"""What a project declares about TensorFlow, Keras and TF Hub, read from its files as text (never executed):
pyproject.toml (PEP 621 dependencies and optional groups, PEP 735 dependency groups, Poetry), requirements*.txt and
constraints (with `-r`/`-c` includes), setup.cfg, setup.py `install_requires`/`extras_require` (read as an AST),
Pipfile, conda environment files, and Dockerfiles (mpdoctor.project.dockerfiles: a TensorFlow image in `FROM`,
`pip install` in `RUN`, `ENV TF_USE_LEGACY_KERAS=1`).

mpdoctor.project.target turns these declarations into the target a file is judged against.
"""

from __future__ import annotations

import ast
import configparser
import os
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tomllib

from mpdoctor.project.dockerfiles import dockerfile_declarations, is_dockerfile
from mpdoctor.project.requirements import (
    Declaration,
    named_declaration,
    parse_requirement,
    read_project_file,
    shown,
)

PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")


_MAX_INCLUDE_DEPTH = 16  # `-r` includes followed in a chain (pip has no limit; real projects nest two or three)
_MAX_INCLUDES = 256  # requirements files read per directory


@dataclass
class _Reading:
    """The reading of one directory's project files: the requirements files read (each once), and what could not
    be read, said as notes (`--show-target`, the report's notes) instead of stopping the run."""

    notes: list[str]
    seen: set[Path] = field(default_factory=set)


def _requirements_file(
    path: Path, reading: _Reading, via: str = "", depth: int = 0, included_at: str = ""
) -> list[Declaration]:
    """requirements / constraints format, following `-r` and `-c` includes (relative to the including file)."""
    key = path.resolve()
    if key in reading.seen:
        return []
    at = f"{included_at}: " if included_at else ""
    if len(reading.seen) >= _MAX_INCLUDES:
        reading.notes.append(f"{at}{shown(path)}: not read: more than {_MAX_INCLUDES} requirements files")
        return []
    reading.seen.add(key)
    unread: list[str] = []
    text = read_project_file(path, unread)
    reading.notes += [at + note for note in unread]
    if text is None:
        return []
    found: list[Declaration] = []
    for start, line in _logical_lines(text):
        include = re.match(r"^(?:-r|-c|--requirement|--constraint)(?:\s+|=)(\S+)", line)
        if include:
            if depth >= _MAX_INCLUDE_DEPTH:
                reading.notes.append(
                    f"{shown(path)}:{start}: {include.group(1)} not read: includes nested more than "
                    f"{_MAX_INCLUDE_DEPTH} deep"
                )
            else:
                included = path.parent / include.group(1)
                at = f"{shown(path)}:{start}"
                found += _requirements_file(included, reading, via or shown(path), depth + 1, at)
            continue
        if line.startswith("-"):
            continue  # --index-url, -e, --hash...
        origin = f"{shown(path)}:{start}" + (f" (via {via})" if via else "")
        declaration = parse_requirement(line, origin)
        if declaration:
            found.append(declaration)
    return found


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, text) of each requirement line, `\\`-continued lines joined, comments dropped."""
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not parts:
            start = number
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            parts.append(line[:-1])
            continue
        parts.append(line)
        joined = " ".join(parts).strip()  # joined once: a long continued line costs its length, not its square
        parts = []
        if joined:
            yield start, joined


class _Lines:
    """Where a value of a project file is written: the first line of each quoted string and of each `key =`, indexed
    in one pass (looking each of 20,000 dependencies up by rescanning the text took minutes)."""

    _STRING = re.compile(r"\"((?:[^\"\\\n]|\\.)*)\"|'([^'\n]*)'")
    _KEY = re.compile(r"^[ \t]*[\"']?([A-Za-z0-9_.\-]+)[\"']?[ \t]*=", re.MULTILINE)

    def __init__(self, text: str) -> None:
        self.text = text
        self._strings: dict[str, int] | None = None
        self._keys: dict[str, int] | None = None

    def _index(self, pattern: re.Pattern[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        line, position = 1, 0
        for match in pattern.finditer(self.text):
            line += self.text.count("\n", position, match.start())
            position = match.start()
            found.setdefault(next(g for g in match.groups() if g is not None), line)
        return found

    def of_string(self, value: str) -> int:
        if self._strings is None:
            self._strings = self._index(self._STRING)
        return self._strings.get(value, 1)

    def of_key(self, name: str) -> int:
        if self._keys is None:
            self._keys = self._index(self._KEY)
        return self._keys.get(name, 1)


def _toml(path: Path, notes: list[str]) -> tuple[_Lines, dict[str, Any]] | None:
    """A project's TOML file, its lines and data; None when it is unreadable or not TOML (it then declares nothing)."""
    text = read_project_file(path, notes)
    if text is None:
        return None
    try:
        return _Lines(text), tomllib.loads(text)
    except (ValueError, RecursionError) as exc:  # TOMLDecodeError; an integer of 5,000 digits; arrays nested deep
        notes.append(f"{shown(path)}: not read: {_problem(exc)}")
        return None


def _problem(exc: BaseException) -> str:
    """An exception of a reader as a short reason (its message can be the whole offending value)."""
    text = str(exc)
    return type(exc).__name__ + (f": {text[:120]}..." if len(text) > 120 else f": {text}" if text else "")


def project_toml(path: Path) -> dict[str, Any] | None:
    """The data of a project's TOML file; None when it is unreadable or not TOML."""
    read = _toml(path, [])
    return read[1] if read is not None else None


def _pyproject(path: Path, notes: list[str]) -> list[Declaration]:
    read = _toml(path, notes)
    if read is None:
        return []
    lines, data = read
    found: list[Declaration] = []

    def pep508(items, where: str) -> None:
        for item in items if isinstance(items, list) else []:
            if isinstance(item, str):
                declaration = parse_requirement(item, f"{shown(path)}:{lines.of_string(item)} ({where})")
                if declaration:
                    found.append(declaration)

    project = data.get("project", {}) if isinstance(data.get("project"), dict) else {}
    pep508(project.get("dependencies"), "[project] dependencies")
    optional = project.get("optional-dependencies")
    for group, items in optional.items() if isinstance(optional, dict) else ():
        pep508(items, f"[project.optional-dependencies] {group}")
    groups = data.get("dependency-groups")
    for group, items in groups.items() if isinstance(groups, dict) else ():
        pep508(items, f"[dependency-groups] {group}")
    poetry = data.get("tool", {}).get("poetry", {}) if isinstance(data.get("tool"), dict) else {}
    if isinstance(poetry, dict):
        tables = [("[tool.poetry.dependencies]", poetry.get("dependencies"))]
        tables.append(("[tool.poetry.dev-dependencies]", poetry.get("dev-dependencies")))
        for group, table in poetry["group"].items() if isinstance(poetry.get("group"), dict) else ():
            if isinstance(table, dict):  # `[tool.poetry.group] dev = "x"` is no group
                tables.append((f"[tool.poetry.group.{group}.dependencies]", table.get("dependencies")))
        for where, table in tables:
            for name, constraint in (table or {}).items() if isinstance(table, dict) else ():
                specifier = _poetry_specifier(constraint)
                if specifier is None:
                    continue
                declaration = named_declaration(
                    name, specifier, f"{shown(path)}:{lines.of_key(name)} ({where})", f"{name} = {constraint!r}"
                )
                if declaration:
                    found.append(declaration)
    return found


def _poetry_specifier(constraint) -> str | None:
    """Poetry's constraint syntax as a PEP 440 specifier: `^2.10` -> `>=2.10,<3.0`, `~2.10` -> `>=2.10,<2.11`,
    `*` -> any; a table's `version`; alternatives (`||`, a list of tables) are not read (None)."""
    if isinstance(constraint, dict):
        constraint = constraint.get("version", "*")
    if not isinstance(constraint, str) or "||" in constraint:
        return None
    parts = []
    for piece in re.split(r"\s*,\s*|\s+(?=[<>=!~^])", constraint.strip()):
        if piece in ("", "*"):
            continue
        if piece[0] in "^~" and not piece.startswith("~="):
            numbers = piece[1:].split(".")
            if not all(n.isdigit() and len(n) < 12 for n in numbers):  # int() refuses thousands of digits
                return None
            values = [int(n) for n in numbers]
            if piece[0] == "^":
                bump = next((i for i, v in enumerate(values) if v != 0), len(values) - 1)
            else:
                bump = min(1, len(values) - 1) if len(values) > 1 else 0
            upper = values[: bump + 1]
            upper[bump] += 1
            parts += [f">={piece[1:]}", "<" + ".".join(map(str, upper))]
        elif piece[0].isdigit():
            parts.append(f"=={piece}")
        else:
            parts.append(piece)
    return ",".join(parts)


def _setup_cfg(path: Path, notes: list[str]) -> list[Declaration]:
    text = read_project_file(path, notes)
    if text is None:
        return []
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error as exc:
        notes.append(f"{shown(path)}: not read: {_problem(exc)}")
        return []
    values = []
    if parser.has_option("options", "install_requires"):
        values.append(parser.get("options", "install_requires"))
    if parser.has_section("options.extras_require"):
        values += [value for _, value in parser.items("options.extras_require")]
    found = []
    line_of = _stripped_lines(text)
    for value in values:
        for item in value.splitlines():
            item = item.split("#", 1)[0].strip()
            if item:
                declaration = parse_requirement(item, f"{shown(path)}:{line_of.get(item, 1)}")
                if declaration:
                    found.append(declaration)
    return found


def _stripped_lines(text: str) -> dict[str, int]:
    """Each line of an INI file without its comment and blanks -> its first line number."""
    found: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        found.setdefault(line.split("#", 1)[0].strip(), number)
    return found


def _setup_py(path: Path, notes: list[str]) -> list[Declaration]:
    """Strings of `setup(install_requires=..., extras_require=...)`, following names assigned at module level
    (`REQUIRED = [...]`); read from the AST, never run."""
    text = read_project_file(path, notes)
    if text is None:
        return []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:  # the last two: nested too deep to parse
        notes.append(f"{shown(path)}: not read: {_problem(exc) if not isinstance(exc, SyntaxError) else 'not Python'}")
        return []
    assigned: dict[str, list[ast.AST]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(stmt.value)
    strings: list[ast.Constant] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "setup"
        ):
            for keyword in node.keywords:
                if keyword.arg in ("install_requires", "extras_require"):
                    _collect_strings(keyword.value, assigned, strings)
    found = []
    for constant in strings:
        declaration = parse_requirement(constant.value, f"{shown(path)}:{constant.lineno}")
        if declaration:
            found.append(declaration)
    return found


def _collect_strings(
    node: ast.AST, assigned: dict[str, list[ast.AST]], strings: list[ast.Constant], depth: int = 0
) -> None:
    """The string constants a requirement list of setup.py is built from: list, tuple and set elements, dict values,
    both sides of `+`, and the values of module-level names (to six levels)."""
    if depth > 6:
        return
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        strings.append(node)
    elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        for element in node.elts:
            _collect_strings(element, assigned, strings, depth + 1)
    elif isinstance(node, ast.Dict):
        for value in node.values:
            _collect_strings(value, assigned, strings, depth + 1)
    elif isinstance(node, ast.BinOp):
        _collect_strings(node.left, assigned, strings, depth + 1)
        _collect_strings(node.right, assigned, strings, depth + 1)
    elif isinstance(node, ast.Name):
        for value in assigned.get(node.id, ()):
            _collect_strings(value, assigned, strings, depth + 1)


def _pipfile(path: Path, notes: list[str]) -> list[Declaration]:
    read = _toml(path, notes)
    if read is None:
        return []
    lines, data = read
    found = []
    for section in ("packages", "dev-packages"):
        table = data.get(section)
        for name, constraint in table.items() if isinstance(table, dict) else ():  # `packages = 5` is no table
            if isinstance(constraint, dict):
                constraint = constraint.get("version", "*")
            if not isinstance(constraint, str):
                continue
            specifier = "" if constraint.strip() == "*" else constraint
            origin = f"{shown(path)}:{lines.of_key(name)}"
            declaration = named_declaration(name, specifier, origin, f"{name} = {constraint!r}")
            if declaration:
                found.append(declaration)
    return found


_CONDA_ITEM = re.compile(r"^\s*-\s*(?:[\w.-]+::)?([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*(.*?)\s*(?:#.*)?$")


def _conda_specifier(spec: str) -> str:
    """conda's `=2.10` (any 2.10.x) and `2.10.*` as PEP 440; `==`, `>=`... unchanged."""
    spec = spec.strip().replace(" ", "")
    if not spec:
        return ""
    if spec.startswith("=") and not spec.startswith("=="):
        return "==" + spec[1:].rstrip(".*") + ".*"
    if spec[0].isdigit():
        return "==" + spec
    return spec


def _environment_yml(path: Path, notes: list[str]) -> list[Declaration]:
    """A conda environment file, line by line (conda and nested pip entries); no YAML library needed."""
    text = read_project_file(path, notes)
    if text is None:
        return []
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = _CONDA_ITEM.match(line)
        if not match or match.group(1) == "pip":
            continue
        name, rest = match.group(1), match.group(2)
        item = line.strip()[1:].strip()
        declaration = parse_requirement(item, f"{shown(path)}:{number}")
        if declaration is None:
            declaration = named_declaration(name, _conda_specifier(rest), f"{shown(path)}:{number}", item)
        if declaration:
            found.append(declaration)
    return found


# ------------------------------------------------------------------------------------------------ directories


def _is_requirements(name: str) -> bool:
    lower = name.lower()
    return lower.endswith((".txt", ".in")) and ("requirements" in lower or lower.startswith("constraints"))


_Reader = Callable[[Path, list[str]], list[Declaration]]
_READERS: tuple[tuple[Callable[[str], bool], _Reader], ...] = (
    (lambda n: n == "pyproject.toml", _pyproject),
    (lambda n: n == "setup.cfg", _setup_cfg),
    (lambda n: n == "setup.py", _setup_py),  # only `setup(install_requires=...)` is read
    (lambda n: n == "Pipfile", _pipfile),
    (lambda n: n.lower() in ("environment.yml", "environment.yaml", "conda.yml", "conda.yaml"), _environment_yml),
)


def declarations_in(directory: Path, notes: list[str] | None = None) -> list[Declaration]:
    """Every declaration of the project files directly in `directory` (and its `requirements/` and `docker/`
    folders), in a fixed order: pyproject.toml, setup.cfg, setup.py, Pipfile, conda, requirements, Dockerfiles.
    A file that cannot be read or understood declares nothing; why goes to `notes`."""
    reading = _Reading(notes if notes is not None else [])
    found: list[Declaration] = []
    names = _file_names(directory)
    for matches, reader in _READERS:
        for name in names:
            if matches(name):
                found += _guarded(reader, directory / name, reading.notes)

    def requirements(path: Path, notes: list[str]) -> list[Declaration]:
        return _requirements_file(path, reading)

    for name in names:
        if _is_requirements(name):
            found += _guarded(requirements, directory / name, reading.notes)
    for name in _file_names(directory / "requirements"):
        if name.endswith((".txt", ".in")):
            found += _guarded(requirements, directory / "requirements" / name, reading.notes)
    for folder in (directory / "docker", directory):
        for name in _file_names(folder):
            if is_dockerfile(name):
                found += _guarded(dockerfile_declarations, folder / name, reading.notes)
    return found


def _file_names(directory: Path) -> list[str]:
    """The names of the files in `directory` (symlinks to files included), sorted; none when it is no directory."""
    try:
        with os.scandir(directory) as entries:
            return sorted(entry.name for entry in entries if entry.is_file())
    except OSError:
        return []


def _guarded(reader: _Reader, path: Path, notes: list[str]) -> list[Declaration]:
    """`reader(path)`; a file whose content defeats its reader (a value of an unexpected type, nesting too deep to
    parse) declares nothing and is noted: a malformed project file never stops the run."""
    try:
        return [replace(d, file=shown(path)) for d in reader(path, notes)]
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError, MemoryError) as exc:
        notes.append(f"{shown(path)}: not read: {_problem(exc)}")
        return []


def is_project_root(directory: Path) -> bool:
    """A directory with .git, pyproject.toml, setup.cfg or a packaging setup.py (model code often has a
    `utils/setup.py` module of its own: that is no project root)."""
    for marker in PROJECT_MARKERS:
        path = directory / marker
        if marker == "setup.py":
            text = read_project_file(path) if path.is_file() else None
            if text is not None and re.search(r"\b(setuptools|distutils)\b", text):
                return True
        elif path.exists():
            return True
    return False
