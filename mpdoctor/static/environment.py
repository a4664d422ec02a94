"""What the installed environment says about Keras, read from package metadata only (never imports TensorFlow)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import metadata

from mpdoctor.facts.keras_semantics import legacy_keras_env


@dataclass(frozen=True)
class KerasVersion:
    major: int  # 2 or 3
    reason: str
    certain: bool


def _version(distribution: str) -> tuple[int, int] | None:
    try:
        parts = metadata.version(distribution).split(".")
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (metadata.PackageNotFoundError, ValueError, IndexError):
        return None


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
