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


def _requirements_file(path: Path, seen: set[Path], via: str = "") -> list[Declaration]:
    """requirements / constraints format, following `-r` and `-c` includes (relative to the including file)."""
    key = path.resolve()
    if key in seen:
        return []
    seen.add(key)
    text = read_project_file(path)
    if text is None:
        return []
    found: list[Declaration] = []
    logical = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not logical:
            start = number
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        line, logical = (logical + line).strip(), ""
        if not line:
            continue
        include = re.match(r"^(?:-r|-c|--requirement|--constraint)(?:\s+|=)(\S+)", line)
        if include:
            found += _requirements_file(path.parent / include.group(1), seen, via or shown(path))
            continue
        if line.startswith("-"):
            continue  # --index-url, -e, --hash...
        origin = f"{shown(path)}:{start}" + (f" (via {via})" if via else "")
        declaration = parse_requirement(line, origin)
        if declaration:
            found.append(declaration)
    return found


def _line_of(text: str, needle: str, default: int = 1) -> int:
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    return default


def _toml(path: Path) -> tuple[str, dict[str, Any]] | None:
    """A project's TOML file, its text and data; None when it is unreadable or not TOML (it then declares nothing)."""
    text = read_project_file(path)
    if text is None:
        return None
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None


def project_toml(path: Path) -> dict[str, Any] | None:
    """The data of a project's TOML file; None when it is unreadable or not TOML."""
    read = _toml(path)
    return read[1] if read is not None else None


def _pyproject(path: Path) -> list[Declaration]:
    read = _toml(path)
    if read is None:
        return []
    text, data = read
    found: list[Declaration] = []

    def pep508(items, where: str) -> None:
        for item in items if isinstance(items, list) else []:
            if isinstance(item, str):
                line = _line_of(text, f'"{item}"', _line_of(text, f"'{item}'"))
                declaration = parse_requirement(item, f"{shown(path)}:{line} ({where})")
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
        for group, table in (poetry.get("group") or {}).items() if isinstance(poetry.get("group"), dict) else ():
            tables.append((f"[tool.poetry.group.{group}.dependencies]", (table or {}).get("dependencies")))
        for where, table in tables:
            for name, constraint in (table or {}).items() if isinstance(table, dict) else ():
                specifier = _poetry_specifier(constraint)
                if specifier is None:
                    continue
                line = _line_of(text, f"{name} =", _line_of(text, name))
                declaration = named_declaration(
                    name, specifier, f"{shown(path)}:{line} ({where})", f"{name} = {constraint!r}"
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
            if not all(n.isdigit() for n in numbers):
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


def _setup_cfg(path: Path) -> list[Declaration]:
    text = read_project_file(path)
    if text is None:
        return []
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return []
    values = []
    if parser.has_option("options", "install_requires"):
        values.append(parser.get("options", "install_requires"))
    if parser.has_section("options.extras_require"):
        values += [value for _, value in parser.items("options.extras_require")]
    found = []
    for value in values:
        for item in value.splitlines():
            item = item.split("#", 1)[0].strip()
            if item:
                declaration = parse_requirement(item, f"{shown(path)}:{_line_of(text, item)}")
                if declaration:
                    found.append(declaration)
    return found


def _setup_py(path: Path) -> list[Declaration]:
    """Strings of `setup(install_requires=..., extras_require=...)`, following names assigned at module level
    (`REQUIRED = [...]`); read from the AST, never run."""
    text = read_project_file(path)
    if text is None:
        return []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError):
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


def _pipfile(path: Path) -> list[Declaration]:
    read = _toml(path)
    if read is None:
        return []
    text, data = read
    found = []
    for section in ("packages", "dev-packages"):
        for name, constraint in (data.get(section) or {}).items():
            if isinstance(constraint, dict):
                constraint = constraint.get("version", "*")
            if not isinstance(constraint, str):
                continue
            specifier = "" if constraint.strip() == "*" else constraint
            line = _line_of(text, f"{name} =", _line_of(text, name))
            declaration = named_declaration(name, specifier, f"{shown(path)}:{line}", f"{name} = {constraint!r}")
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


def _environment_yml(path: Path) -> list[Declaration]:
    """A conda environment file, line by line (conda and nested pip entries); no YAML library needed."""
    text = read_project_file(path)
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


def declarations_in(directory: Path) -> list[Declaration]:
    """Every declaration of the project files directly in `directory` (and its `requirements/` and `docker/`
    folders), in a fixed order: pyproject.toml, setup.cfg, setup.py, requirements, Pipfile, conda, Dockerfiles."""
    try:
        names = sorted(entry.name for entry in os.scandir(directory) if entry.is_file())
    except OSError:
        return []
    found: list[Declaration] = []
    readers = (
        (lambda n: n == "pyproject.toml", _pyproject),
        (lambda n: n == "setup.cfg", _setup_cfg),
        (lambda n: n == "setup.py", _setup_py),  # only `setup(install_requires=...)` is read
        (lambda n: n == "Pipfile", _pipfile),
        (lambda n: n.lower() in ("environment.yml", "environment.yaml", "conda.yml", "conda.yaml"), _environment_yml),
    )
    for matches, reader in readers:
        for name in names:
            if matches(name):
                found += reader(directory / name)
    seen: set[Path] = set()
    for name in names:
        if _is_requirements(name):
            found += _requirements_file(directory / name, seen)
    for sub in ("requirements", "docker"):
        folder = directory / sub
        if folder.is_dir():
            for entry in sorted(os.scandir(folder), key=lambda e: e.name):
                if entry.is_file() and sub == "requirements" and entry.name.endswith((".txt", ".in")):
                    found += _requirements_file(Path(entry.path), seen)
                elif entry.is_file() and sub == "docker" and is_dockerfile(entry.name):
                    found += dockerfile_declarations(Path(entry.path))
    for name in names:
        if is_dockerfile(name):
            found += dockerfile_declarations(directory / name)
    return found


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
