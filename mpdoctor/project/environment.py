"""What the installed environment says about Keras, read from package metadata only (never imports TensorFlow)."""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from mpdoctor.facts.keras_semantics import legacy_keras_env
from mpdoctor.project.backend import KERAS_BACKEND_ENV, backend_name
from mpdoctor.reads import read_text

_KERAS_JSON_LIMIT = 1 << 20  # a keras.json is a few lines


@dataclass(frozen=True)
class KerasVersion:
    major: int  # 2 or 3
    reason: str
    certain: bool


def _version(distribution: str) -> tuple[int, int] | None:
    text = _wheel_version(distribution)
    if text is None:  # not installed, or installed otherwise than as a wheel: importlib.metadata knows
        from importlib import metadata

        try:
            text = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            return None
    try:
        parts = text.split(".")
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (ValueError, IndexError):
        return None


def _wheel_version(distribution: str) -> str | None:
    """The version importlib.metadata reads for an installed wheel, from the name of its `name-version.dist-info`
    directory, found as importlib.metadata finds it (the first sys.path entry holding one, names compared
    normalised): a static run need not import importlib.metadata (and email, zipfile, csv...: 15 ms of its
    start-up). None when there is none, or anything else matches too (an .egg-info, a second one)."""
    wanted = _normalised(distribution)
    for entry in sys.path:
        if entry.lower().endswith(".egg"):  # an egg's metadata is inside it: importlib.metadata reads it
            return None
        found = [name for name in _listing(entry or ".") if _normalised(name.partition("-")[0]) == wanted]
        if found:
            name = found[0]
            if len(found) > 1 or not name.lower().endswith(".dist-info") or "-" not in name:
                return None
            return name[: -len(".dist-info")].partition("-")[2]
    return None


@functools.cache
def _listing(directory: str) -> tuple[str, ...]:
    """The metadata directories (`*.dist-info`, `*.egg-info`) in a sys.path entry."""
    try:
        names = os.listdir(directory)
    except OSError:  # not a directory (a zip), gone, unreadable
        return ()
    return tuple(n for n in names if n.lower().endswith((".dist-info", ".egg-info")))


def _normalised(name: str) -> str:
    """importlib.metadata's comparison of distribution names (PEP 503, `-`/`.` as `_`, any case)."""
    return re.sub(r"[-_.]+", "_", name).lower()


@functools.cache
def tensorflow_version() -> tuple[int, int] | None:
    for dist in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly", "tensorflow-macos"):
        found = _version(dist)
        if found:
            return found
    return None


@functools.cache
def standalone_keras_major() -> int | None:
    found = _version("keras")
    return found[0] if found else None


def tf_keras_version():
    """Which Keras `tf.keras` is here: Keras 2 with TF_USE_LEGACY_KERAS=1 or TF < 2.16, else Keras 3."""
    if legacy_keras_env():
        return KerasVersion(2, "TF_USE_LEGACY_KERAS=1 in the environment", True)
    tf = tensorflow_version()
    if tf is None:
        return KerasVersion(3, "TensorFlow is not installed here; assuming TF >= 2.16 (Keras 3)", False)
    if tf < (2, 16):
        return KerasVersion(2, f"TensorFlow {tf[0]}.{tf[1]} is installed (tf.keras is Keras 2)", True)
    return KerasVersion(3, f"TensorFlow {tf[0]}.{tf[1]} is installed (tf.keras is Keras 3)", True)


@functools.cache
def hub_installed() -> bool:
    return _version("tensorflow-hub") is not None


def tf_keras_installed() -> bool:
    """tf_keras can be imported here (the trace can then run a Keras 2 target under TF_USE_LEGACY_KERAS=1)."""
    return _version("tf-keras") is not None or _version("tf_keras") is not None


def keras_backend() -> tuple[str, str] | None:
    """(backend, origin) this environment selects for Keras 3: KERAS_BACKEND, else the `backend` of keras.json
    (`$KERAS_HOME`, else `~/.keras`); None: neither says."""
    value = os.environ.get(KERAS_BACKEND_ENV)
    if value:
        name = backend_name(value)
        return (name, f"{KERAS_BACKEND_ENV}={value} in the environment") if name else None
    return _keras_json_origin(keras_json_path())


def keras_json_path(environ: Mapping[str, str] | None = None) -> str:
    """The keras.json Keras reads: in KERAS_HOME, else ~/.keras."""
    environ = os.environ if environ is None else environ
    home = environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return os.path.join(home, "keras.json")


def keras_json_backend(path: str) -> str | None:
    """The `backend` the keras.json at `path` sets, as written; None without a readable one (Keras then ignores it
    too)."""
    try:
        document = json.loads(read_text(path, _KERAS_JSON_LIMIT, "keras.json"))
    except (OSError, ValueError):
        return None
    backend = document.get("backend") if isinstance(document, dict) else None
    return backend if isinstance(backend, str) and backend else None


@functools.lru_cache(maxsize=8)
def _keras_json_origin(path: str) -> tuple[str, str] | None:
    value = keras_json_backend(path)
    name = backend_name(value)
    return (name, f'"backend": "{value}" in {path}') if name else None
