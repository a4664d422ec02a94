"""What a project's Dockerfiles declare: the TensorFlow a `FROM` image ships (official, NVIDIA, AWS and Google
images; NVIDIA's tags through tensorflow_containers.toml), `pip install` in `RUN`, `ENV TF_USE_LEGACY_KERAS=1`."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path

import tomllib

from mpdoctor.facts.keras_semantics import LEGACY_KERAS_ENV, legacy_keras_requested
from mpdoctor.facts.tf_releases import KNOWN_RELEASES, TF2_RELEASES, Release, parse_release
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


def dockerfile_declarations(path: Path) -> list[Declaration]:
    """Every declaration of one Dockerfile (`ARG` values substituted, continued lines joined)."""
    text = read_project_file(path)
    if text is None:
        return []
    args: dict[str, str] = {}
    found: list[Declaration] = []
    for start, line in _instructions(text):
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
            found += _pip_installs(line, origin)
    return found


def _instructions(text: str) -> Iterator[tuple[int, str]]:
    """(line number, instruction) of each instruction, its continued lines joined; no blank lines or comments."""
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        start = number + 1
        line = lines[number].strip()
        while line.endswith("\\") and number + 1 < len(lines):
            number += 1
            line = line[:-1] + " " + lines[number].strip()
        number += 1
        if line and not line.startswith("#"):
            yield start, line


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


def _substitute(line: str, args: dict[str, str]) -> str:
    def value(match: re.Match) -> str:
        name, default = match.group(1) or match.group(3), match.group(2)
        return args.get(name) or (default or "")

    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)", value, line)


def is_dockerfile(name: str) -> bool:
    lower = name.lower()
    return lower == "dockerfile" or lower.startswith("dockerfile.") or lower.endswith(".dockerfile")
