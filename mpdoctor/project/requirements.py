"""One requirement a project declares about TensorFlow, Keras, tf_keras, TF Hub or TF_USE_LEGACY_KERAS (the
Declaration record), read from a PEP 508 string; the TensorFlow releases and Keras majors a version specifier allows.
The readers of each kind of project file (mpdoctor.project.declared, mpdoctor.project.dockerfiles) make them."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from mpdoctor.facts.tf_releases import KNOWN_RELEASES, TF2_RELEASES, Release
from mpdoctor.project.backend import BACKEND_PACKAGES
from mpdoctor.reads import CONFIG_LIMIT, read_bytes

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
_INTERESTING = re.compile(r"(?i)tensorflow|tf[-_.]?(nightly|keras)|keras|jax|torch")

TENSORFLOW = "tensorflow"
LEGACY_ENV = "legacy-keras-env"


@dataclass(frozen=True)
class Declaration:
    """One statement of a project file about TensorFlow, Keras, tf_keras, TF Hub or TF_USE_LEGACY_KERAS."""

    # "tensorflow" | "keras" | "tf-keras" | "tensorflow-hub" | "legacy-keras-env"; Keras 3's backends (issue 36):
    # "jax" | "torch" (the packages), "keras-backend-env" (`ENV KERAS_BACKEND=...`, the backend as specifier)
    kind: str
    specifier: str  # PEP 440 specifier ("" = any version); for a container image the release it ships
    origin: str  # where, as shown: "requirements.txt:3"
    text: str  # as written
    releases: frozenset[Release] | None = None  # tensorflow: the releases it allows; None: nothing known
    note: str = ""  # why it says nothing (an unknown image tag...)
    file: str = ""  # the project file of the directory it was found in, as shown (the including one for `-r`)

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
        spec = SpecifierSet(_release_segments(specifier))
        return frozenset(
            release
            for release in KNOWN_RELEASES
            if any(spec.contains(f"{release[0]}.{release[1]}.{patch}", prereleases=True) for patch in range(12))
        )
    except (InvalidSpecifier, ValueError):  # ValueError: a version of thousands of digits (int() refuses it)
        return None


# `==2.15.0.post1`, `==2.15.0+cpu`, `==2.15.0rc1`: a post, local or pre-release of 2.15.0 is TensorFlow 2.15 (what
# mpdoctor compares on), but `==` with one matches no plain release: versions are compared on their release segment.
_SUFFIXES = re.compile(
    r"(?i)(?<=\d)(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?\d*)?(?:[-_.]?(?:post|rev|r)[-_.]?\d*|-\d+)?"
    r"(?:[-_.]?dev[-_.]?\d*)?(?:\+[a-z0-9.]*)?(?=\s*(?:,|$))"
)


def _release_segments(specifier: str) -> str:
    """The specifier with the pre-, post-, dev-release and local labels of its versions dropped."""
    return _SUFFIXES.sub("", specifier)


@functools.lru_cache(maxsize=128)
def keras_majors_for(specifier: str) -> frozenset[int]:
    """Which Keras majors a `keras` package specifier allows (keras 2.0-2.15, 3.0-3.20)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    majors = set()
    try:
        spec = SpecifierSet(_release_segments(specifier))
        for major, minors in ((2, range(16)), (3, range(21))):
            if any(spec.contains(f"{major}.{minor}.0", prereleases=True) for minor in minors):
                majors.add(major)
    except (InvalidSpecifier, ValueError):
        return frozenset({2, 3})
    return frozenset(majors) or frozenset({2, 3})


def named_declaration(name: str, specifier: str, origin: str, text: str) -> Declaration | None:
    """The declaration of package `name` at `specifier`, None for a package of no interest."""
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
    if name in BACKEND_PACKAGES:
        return Declaration(BACKEND_PACKAGES[name], specifier, origin, text)
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
    return named_declaration(match.group("name"), specifier, origin, text.strip())


# ------------------------------------------------------------------------------------------- project files


def shown(path: Path) -> str:
    """A path as reports show it: relative to the current directory when inside it."""
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if relative.startswith("..") else relative


def read_project_file(path: Path, notes: list[str] | None = None) -> str | None:
    """The text of a project file (undecodable bytes replaced), None when it cannot be read: through the regular-file
    reader, so `-r /dev/zero` or a FIFO is refused, never read forever. Why it was not read goes to `notes`."""
    try:
        return read_bytes(path, CONFIG_LIMIT, "project file").decode("utf-8", errors="replace")
    except OSError as exc:
        if notes is not None and not isinstance(exc, FileNotFoundError):
            notes.append(f"{shown(path)}: not read: {exc.strerror or exc}")
        return None
