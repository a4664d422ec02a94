"""What a project declares about TensorFlow, Keras and TF Hub, read from its files as text (never executed):
pyproject.toml (PEP 621 dependencies and optional groups, PEP 735 dependency groups, Poetry), requirements*.txt and
constraints (with `-r`/`-c` includes), setup.cfg, setup.py `install_requires`/`extras_require` (read as an AST),
Pipfile, conda environment files, and Dockerfiles (a TensorFlow image in `FROM`, `pip install` in `RUN`,
`ENV TF_USE_LEGACY_KERAS=1`).

mpdoctor.project.target turns these declarations into the target a file is judged against.
"""

from __future__ import annotations

import ast
import configparser
import functools
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import tomllib

from mpdoctor.facts.keras_semantics import LEGACY_KERAS_ENV, legacy_keras_requested
from mpdoctor.facts.tf_releases import KNOWN_RELEASES, TF2_RELEASES, Release, parse_release

# Distributions that are TensorFlow itself (any of them decides the version), and the nightlies (the newest).
TENSORFLOW_DISTRIBUTIONS = frozenset(
    {
        "tensorflow",
        "tensorflow-gpu",
        "tensorflow-cpu",
        "tensorflow-macos",
        "tensorflow-intel",
        "tensorflow-aarch64",
        "tensorflow-rocm",
        "intel-tensorflow",
        "nvidia-tensorflow",  # NVIDIA's TensorFlow 1.15 wheels
    }
)
NIGHTLY_DISTRIBUTIONS = frozenset({"tf-nightly", "tf-nightly-gpu", "tf-nightly-cpu"})
KINDS = {"keras": "keras", "tf-keras": "tf-keras", "tensorflow-hub": "tensorflow-hub"}
_INTERESTING = re.compile(r"(?i)tensorflow|tf[-_.]?(nightly|keras)|keras")

TENSORFLOW = "tensorflow"
LEGACY_ENV = "legacy-keras-env"
PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
_CONTAINERS = Path(__file__).with_name("tensorflow_containers.toml")


@dataclass(frozen=True)
class Declaration:
    """One statement of a project file about TensorFlow, Keras, tf_keras, TF Hub or TF_USE_LEGACY_KERAS."""

    kind: str  # "tensorflow" | "keras" | "tf-keras" | "tensorflow-hub" | "legacy-keras-env"
    specifier: str  # PEP 440 specifier ("" = any version); for a container image the release it ships
    origin: str  # where, as shown: "requirements.txt:3"
    text: str  # as written
    releases: frozenset[Release] | None = None  # tensorflow: the releases it allows; None: nothing known
    note: str = ""  # why it says nothing (an unknown image tag...)

    def describe(self) -> str:
        what = f"{self.origin}: {self.text}"
        return f"{what} ({self.note})" if self.note else what


# ------------------------------------------------------------------------------------------------- versions


@functools.lru_cache(maxsize=512)
def releases_for(specifier: str) -> frozenset[Release] | None:
    """The known TensorFlow releases a specifier allows (any patch of the minor release counts); "" allows every
    TF 2 release (an unpinned dependency means any supported version). None for an unreadable specifier."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet  # only when a project declares TensorFlow

    if not specifier.strip():
        return frozenset(TF2_RELEASES)
    try:
        spec = SpecifierSet(specifier)
    except InvalidSpecifier:
        return None
    return frozenset(
        release
        for release in KNOWN_RELEASES
        if any(spec.contains(f"{release[0]}.{release[1]}.{patch}", prereleases=True) for patch in range(12))
    )


@functools.lru_cache(maxsize=128)
def keras_majors_for(specifier: str) -> frozenset[int]:
    """Which Keras majors a `keras` package specifier allows (keras 2.0-2.15, 3.0-3.20)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        spec = SpecifierSet(specifier)
    except InvalidSpecifier:
        return frozenset({2, 3})
    majors = set()
    for major, minors in ((2, range(16)), (3, range(21))):
        if any(spec.contains(f"{major}.{minor}.0", prereleases=True) for minor in minors):
            majors.add(major)
    return frozenset(majors) or frozenset({2, 3})


def _declaration(name: str, specifier: str, origin: str, text: str) -> Declaration | None:
    name = re.sub(r"[-_.]+", "-", name).lower()  # PEP 503 normalisation
    if name in TENSORFLOW_DISTRIBUTIONS:
        releases = releases_for(specifier)
        if releases is None:
            note = "not a version specifier mpdoctor can read"
        else:
            note = "" if releases else "allows no TensorFlow release mpdoctor knows"
        return Declaration(TENSORFLOW, specifier, origin, text, releases or None, note)
    if name in NIGHTLY_DISTRIBUTIONS:
        return Declaration(TENSORFLOW, "", origin, text, frozenset(TF2_RELEASES), "a nightly: the newest release")
    if name in KINDS:
        return Declaration(KINDS[name], specifier, origin, text)
    return None


# PEP 508 as far as mpdoctor needs it: name, extras, a version specifier (bare or in parentheses) or a URL, markers.
# (packaging.requirements would do it too, at a third of a second of start-up for its grammar.)
_REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[^\]]*\])?\s*"
    r"(?:@\s*\S+|\((?P<paren>[^)]*)\)|(?P<spec>[<>=!~][^;]*))?\s*(?:;.*)?$"
)


def parse_requirement(text: str, origin: str) -> Declaration | None:
    """A PEP 508 requirement string (`tensorflow>=2.12,<2.16`, `tensorflow[and-cuda]==2.15.*; python_version>"3.8"`)
    about one of the packages of interest, else None."""
    if not _INTERESTING.search(text):
        return None  # most lines of a requirements file: no need to parse them
    match = _REQUIREMENT.match(text.strip())
    if not match:
        return None
    specifier = (match.group("paren") or match.group("spec") or "").replace(" ", "").strip()
    return _declaration(match.group("name"), specifier, origin, text.strip())


# --------------------------------------------------------------------------------------------- the files


def shown(path: Path) -> str:
    """A path as reports show it: relative to the current directory when inside it."""
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if relative.startswith("..") else relative


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _requirements_file(path: Path, seen: set[Path], via: str = "") -> list[Declaration]:
    """requirements / constraints format, following `-r` and `-c` includes (relative to the including file)."""
    key = path.resolve()
    if key in seen:
        return []
    seen.add(key)
    text = _read(path)
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


def _pyproject(path: Path) -> list[Declaration]:
    text = _read(path)
    if text is None:
        return []
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return []
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
                declaration = _declaration(
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
    text = _read(path)
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
    text = _read(path)
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

    def collect(node: ast.AST, depth: int = 0) -> None:
        if depth > 6:
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.append(node)
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            for element in node.elts:
                collect(element, depth + 1)
        elif isinstance(node, ast.Dict):
            for value in node.values:
                collect(value, depth + 1)
        elif isinstance(node, ast.BinOp):
            collect(node.left, depth + 1)
            collect(node.right, depth + 1)
        elif isinstance(node, ast.Name):
            for value in assigned.get(node.id, ()):
                collect(value, depth + 1)

    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "setup"
        ):
            for keyword in node.keywords:
                if keyword.arg in ("install_requires", "extras_require"):
                    collect(keyword.value)
    found = []
    for constant in strings:
        declaration = parse_requirement(constant.value, f"{shown(path)}:{constant.lineno}")
        if declaration:
            found.append(declaration)
    return found


def _pipfile(path: Path) -> list[Declaration]:
    text = _read(path)
    if text is None:
        return []
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return []
    found = []
    for section in ("packages", "dev-packages"):
        for name, constraint in (data.get(section) or {}).items():
            if isinstance(constraint, dict):
                constraint = constraint.get("version", "*")
            if not isinstance(constraint, str):
                continue
            specifier = "" if constraint.strip() == "*" else constraint
            line = _line_of(text, f"{name} =", _line_of(text, name))
            declaration = _declaration(name, specifier, f"{shown(path)}:{line}", f"{name} = {constraint!r}")
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
    text = _read(path)
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
            declaration = _declaration(name, _conda_specifier(rest), f"{shown(path)}:{number}", item)
        if declaration:
            found.append(declaration)
    return found


# ------------------------------------------------------------------------------------------------ Dockerfiles

_FROM = re.compile(r"^FROM\s+(?:--\S+\s+)*(\S+)", re.IGNORECASE)
_ARG = re.compile(r"^ARG\s+(\w+)(?:=(\S*))?", re.IGNORECASE)
_ENV = re.compile(r"^ENV\s+(.*)$", re.IGNORECASE)
_PIP_INSTALL = re.compile(r"\b(?:pip3?|python3?\s+-m\s+pip)\s+install\s+(.*)", re.IGNORECASE)
_NVIDIA_TAG = re.compile(r"^(\d\d)\.(\d\d)(?:-(tf1|tf2))?")
_GOOGLE_DLC = re.compile(r"\btf2?-(?:cpu|gpu)\.(\d+)-(\d+)\b")


@functools.cache
def _container_table() -> dict:
    return tomllib.loads(_CONTAINERS.read_text(encoding="utf-8"))


def image_releases(image: str) -> tuple[frozenset[Release] | None, str]:
    """What TensorFlow a container image ships: (releases, note). (None, "") for an image that is not TensorFlow;
    (None, note) for a TensorFlow image whose tag says nothing mpdoctor knows."""
    name, _, tag = image.split("@", 1)[0].rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
    name = name or image
    google = _GOOGLE_DLC.search(name)
    if google:
        release = (int(google.group(1)), int(google.group(2)))
        return (frozenset({release}) if release in KNOWN_RELEASES else None), "Google Deep Learning Container"
    if "tensorflow" not in name.rsplit("/", 1)[-1]:
        return None, ""
    table = _container_table()
    if name.endswith("nvidia/tensorflow"):
        match = _NVIDIA_TAG.match(tag)
        if not match:
            return None, f"unknown NVIDIA container tag {tag!r}"
        year, month, flavour = match.groups()
        if flavour == "tf1":
            release = parse_release(table["nvidia"]["tf1"])
            return frozenset({release}), f"NVIDIA container {year}.{month}-tf1: TensorFlow 1.15"
        if int(year) < 20:
            return frozenset(r for r in KNOWN_RELEASES if r[0] == 1), f"NVIDIA container {year}.{month}: TensorFlow 1"
        version = table["nvidia"]["tf2"].get(f"{year}.{month}")
        if version is None:
            return None, f"NVIDIA container {year}.{month} is not in mpdoctor's table ({_CONTAINERS.name})"
        return frozenset({parse_release(version)}), f"NVIDIA container {year}.{month}: TensorFlow {version}"
    if not tag or tag.startswith(("latest", "nightly", "devel")):
        return frozenset(TF2_RELEASES), f"floating tag {tag or 'latest'!r}: any release"
    release = parse_release(tag.split("-", 1)[0])
    if release is None or release not in KNOWN_RELEASES:
        return None, f"unknown TensorFlow image tag {tag!r}"
    return frozenset({release}), f"TensorFlow {release[0]}.{release[1]} image"


def _dockerfile(path: Path) -> list[Declaration]:
    text = _read(path)
    if text is None:
        return []
    args: dict[str, str] = {}
    found: list[Declaration] = []
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        start = number + 1
        line = lines[number].strip()
        while line.endswith("\\") and number + 1 < len(lines):
            number += 1
            line = line[:-1] + " " + lines[number].strip()
        number += 1
        if not line or line.startswith("#"):
            continue
        origin = f"{shown(path)}:{start}"
        if m := _ARG.match(line):
            args.setdefault(m.group(1), (m.group(2) or "").strip("\"'"))
            continue
        line = _substitute(line, args)
        if m := _FROM.match(line):
            releases, note = image_releases(m.group(1))
            if releases is not None or note:
                found.append(Declaration(TENSORFLOW, "", origin, f"FROM {m.group(1)}", releases, note))
        elif m := _ENV.match(line):
            for key, value in re.findall(r"(\w+)[= ]\"?([^\s\"]*)\"?", m.group(1)):
                if key == LEGACY_KERAS_ENV and legacy_keras_requested(value):
                    found.append(Declaration(LEGACY_ENV, value, origin, f"ENV {key}={value}"))
        elif line.upper().startswith("RUN"):
            for pip in _PIP_INSTALL.finditer(line):
                for token in re.split(r"\s+", pip.group(1)):
                    token = token.strip("\"'")
                    if token in ("&&", ";", "|") or token.startswith("&&"):
                        break
                    if token and not token.startswith("-"):
                        declaration = parse_requirement(token, origin)
                        if declaration:
                            found.append(declaration)
    return found


def _substitute(line: str, args: dict[str, str]) -> str:
    def value(match: re.Match) -> str:
        name, default = match.group(1) or match.group(3), match.group(2)
        return args.get(name) or (default or "")

    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)", value, line)


# ------------------------------------------------------------------------------------------------ directories


def _is_requirements(name: str) -> bool:
    lower = name.lower()
    return lower.endswith((".txt", ".in")) and ("requirements" in lower or lower.startswith("constraints"))


def _is_dockerfile(name: str) -> bool:
    lower = name.lower()
    return lower == "dockerfile" or lower.startswith("dockerfile.") or lower.endswith(".dockerfile")


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
                elif entry.is_file() and sub == "docker" and _is_dockerfile(entry.name):
                    found += _dockerfile(Path(entry.path))
    for name in names:
        if _is_dockerfile(name):
            found += _dockerfile(directory / name)
    return found


def is_project_root(directory: Path) -> bool:
    """A directory with .git, pyproject.toml, setup.cfg or a packaging setup.py (model code often has a
    `utils/setup.py` module of its own: that is no project root)."""
    for marker in PROJECT_MARKERS:
        path = directory / marker
        if marker == "setup.py":
            text = _read(path) if path.is_file() else None
            if text is not None and re.search(r"\b(setuptools|distutils)\b", text):
                return True
        elif path.exists():
            return True
    return False
