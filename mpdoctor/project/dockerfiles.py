"""What a project's Dockerfiles declare: the TensorFlow a `FROM` image ships (official, NVIDIA, AWS and Google
images; NVIDIA's tags through tensorflow_containers.toml), `pip install` in `RUN`, `ENV TF_USE_LEGACY_KERAS=1`."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import tomllib

from mpdoctor.facts.keras_semantics import LEGACY_KERAS_ENV, legacy_keras_requested
from mpdoctor.facts.tf_releases import KNOWN_RELEASES, TF2_RELEASES, Release, parse_release
from mpdoctor.project.backend import BACKEND_ENV, KERAS_BACKEND_ENV, backend_name
from mpdoctor.project.requirements import (
    LEGACY_ENV,
    TENSORFLOW,
    Declaration,
    parse_requirement,
    read_project_file,
    shown,
)

_CONTAINERS = Path(__file__).with_name("tensorflow_containers.toml")
_FROM = re.compile(r"^FROM\s+(?:--\S+\s+)*(\S+)", re.IGNORECASE)
_ARG = re.compile(r"""^ARG\s+(\w+)(?:=("[^"]*"|'[^']*'|\S*))?""", re.IGNORECASE)
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


def dockerfile_declarations(path: Path, notes: list[str] | None = None) -> list[Declaration]:
    """Every declaration of one Dockerfile: continued lines joined, `ARG` and `ENV` variables expanded as a build
    without `--build-arg` would (`_Variables`). A `pip install` of a TensorFlow the stage's image does not ship
    replaces the image's."""
    text = read_project_file(path, notes)
    if text is None:
        return []
    variables = _Variables()
    found: list[Declaration] = []
    image: int | None = None  # where the current stage's TensorFlow image is in `found`
    for start, line in _instructions(text):
        origin = f"{shown(path)}:{start}"
        if m := _ARG.match(line):
            variables.define_arg(m.group(1), m.group(2), start)
            continue
        line, used = variables.expand(line, in_from=_FROM.match(line) is not None)
        declared: list[Declaration] = []
        if m := _FROM.match(line):
            variables.start_stage()
            releases, note = image_releases(m.group(1))
            image = len(found) if releases else None
            if releases is not None or note:
                declared.append(Declaration(TENSORFLOW, "", origin, f"FROM {m.group(1)}", releases, note))
        elif m := _ENV.match(line):
            for key, value in _env_pairs(m.group(1)):
                variables.define_env(key, value, start)
                if key == LEGACY_KERAS_ENV and legacy_keras_requested(value):
                    declared.append(Declaration(LEGACY_ENV, value, origin, f"ENV {key}={value}"))
                elif key == KERAS_BACKEND_ENV and (backend := backend_name(value)) is not None:
                    declared.append(Declaration(BACKEND_ENV, backend, origin, f"ENV {key}={value}"))
        elif line.upper().startswith("RUN"):
            declared += _pip_installs(line, origin)
            if image is not None and _replaces(found[image], declared):
                found[image] = replace(found[image], releases=None, note=f"replaced by the pip install of line {start}")
                image = None
        found += [replace(d, text=f"{d.text} [{used}]") if used else d for d in declared]
    return found


def _replaces(image: Declaration, installed: list[Declaration]) -> bool:
    """pip installs a TensorFlow outside the image's release (one the image satisfies is left as it is)."""
    pinned = [d.releases for d in installed if d.kind == TENSORFLOW and d.releases]
    return bool(pinned) and not any(releases & (image.releases or frozenset()) for releases in pinned)


def _instructions(text: str) -> Iterator[tuple[int, str]]:
    """(line number, instruction) of each instruction, its continued lines joined (comment lines inside one
    skipped, as Docker does); no blank lines or comments."""
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        start = number + 1
        line = lines[number].strip()
        parts = []
        while line.endswith("\\") and number + 1 < len(lines):
            parts.append(line[:-1])
            number += 1
            line = lines[number].strip()
            while line.startswith("#") and number + 1 < len(lines):  # a comment inside: the instruction goes on
                number += 1
                line = lines[number].strip()
        parts.append(line)
        number += 1
        joined = " ".join(parts).strip()  # joined once: 150,000 continued lines cost their length, not its square
        if joined and not joined.startswith("#"):
            yield start, joined


_VARIABLE = re.compile(r"\$\{(\w+)(?:(:?[-+])([^}]*))?\}|\$(\w+)")
_ENV_PAIR = re.compile(r"""(\w+)=("[^"]*"|'[^']*'|\S*)""")


def _env_pairs(text: str) -> list[tuple[str, str]]:
    """`ENV A=1 B="x y"` -> [(A, 1), (B, x y)]; the legacy form `ENV A 1 2` -> [(A, "1 2")]."""
    first = text.split(None, 1)
    if len(first) == 2 and "=" not in first[0]:
        return [(first[0], first[1].strip().strip("\"'"))]
    return [(key, value.strip("\"'")) for key, value in _ENV_PAIR.findall(text)]


class _Variables:
    """The ARG and ENV variables in scope, with where, and their expansion in an instruction, scoped as Docker does:
    an ARG before the first FROM is global, seen by FROM lines (and by a stage that declares it again, `ARG X`); a
    stage's ARG and ENV hold from their line to the end of the stage."""

    def __init__(self) -> None:
        self.globals: dict[str, tuple[str, str]] = {}  # name -> (value, "ARG, line 1")
        self.values: dict[str, tuple[str, str]] = {}  # the current stage's
        self.in_stage = False

    def start_stage(self) -> None:
        self.in_stage, self.values = True, {}

    def define_arg(self, name: str, default: str | None, line: int) -> None:
        scope = self.values if self.in_stage else self.globals
        if default is not None:
            scope[name] = (default.strip("\"'"), f"ARG, line {line}")
        elif self.in_stage and name in self.globals:  # declared again in a stage: the global default
            scope[name] = self.globals[name]
        else:
            scope[name] = ("", f"ARG without a default, line {line}: a --build-arg")

    def define_env(self, name: str, value: str, line: int) -> None:
        self.values[name] = (value, f"ENV, line {line}")

    def expand(self, line: str, in_from: bool = False) -> tuple[str, str]:
        """The line with `$X`, `${X}`, `${X:-default}`, `${X:+alternative}` expanded, and what was expanded
        ("$TF_VERSION='2.4.0' (ARG, line 1)", for --show-target)."""
        if "$" not in line:
            return line, ""
        scope = self.globals if in_from else self.values
        used: dict[str, str] = {}

        def value(match: re.Match[str]) -> str:
            name = match.group(1) or match.group(4)
            operator, word = match.group(2) or "", match.group(3) or ""
            current, where = scope.get(name, ("", ""))
            if name not in used:
                used[name] = f"${name} not defined here" if not where else f"${name}={current!r} ({where})"
            unset = not current if operator.startswith(":") else name not in scope
            if operator.endswith("-"):
                return word if unset else current
            if operator.endswith("+"):
                return "" if unset else word
            return match.group(0) if name not in scope else current  # a variable of the shell, maybe

        return _VARIABLE.sub(value, line), ", ".join(used.values())


def _pip_installs(line: str, origin: str) -> list[Declaration]:
    """The requirements of the `pip install` commands of a RUN instruction (up to the next `&&`, `;` or `|`)."""
    found = []
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


def is_dockerfile(name: str) -> bool:
    lower = name.lower()
    return lower == "dockerfile" or lower.startswith("dockerfile.") or lower.endswith(".dockerfile")
