"""Which backend Keras 3 runs a file on (issue 36): TensorFlow, JAX or PyTorch. Part of the resolved target
(mpdoctor.project.target); the rules word their advice in the backend's own API.

Sources, strongest first (the configuration, `Overrides.keras_backend`, before all of them):

1. the file sets `KERAS_BACKEND` (`os.environ["KERAS_BACKEND"] = "jax"`, `os.environ.update({...})`): Keras reads it
   at import, whatever the environment says;
2. a Dockerfile of the project: `ENV KERAS_BACKEND=jax`;
3. the file sets it with `os.environ.setdefault(...)` (a value the environment has wins);
4. the file imports jax or torch and not TensorFlow (its training step is written for that backend);
5. the project declares jax (`jax`, `jax[cuda12]`, `jaxlib`) or torch and no TensorFlow;
6. the environment mpdoctor runs in: `KERAS_BACKEND`, else the `backend` of `$KERAS_HOME/keras.json`
   (`~/.keras/keras.json`);
7. Keras's default, TensorFlow.

Only Keras 3 has backends: a Keras 2 target runs on TensorFlow whatever these say."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

from mpdoctor.facts.keras_backends import BACKEND_ENV as KERAS_BACKEND_ENV
from mpdoctor.facts.keras_backends import JAX, KERAS_BACKENDS, TENSORFLOW, TORCH
from mpdoctor.facts.keras_semantics import environ_settings

BACKEND_ENV = "keras-backend-env"  # the Declaration kind of a Dockerfile's `ENV KERAS_BACKEND=...`
# A declared package -> the backend it serves (`pytorch`: conda's name of torch).
BACKEND_PACKAGES = {"jax": JAX, "jaxlib": JAX, "torch": TORCH, "pytorch": TORCH}
BACKEND_KINDS = frozenset({JAX, TORCH, BACKEND_ENV})  # the Declaration kinds about the backend
# What Keras accepts as KERAS_BACKEND, exactly as written (keras/src/backend/__init__.py raises on anything else).
_BACKEND_NAMES = frozenset(KERAS_BACKENDS)


def backend_name(value: object) -> str | None:
    """The backend a KERAS_BACKEND value selects, None for a value Keras does not know (or no string)."""
    return value if isinstance(value, str) and value in _BACKEND_NAMES else None


@dataclass(frozen=True)
class Backend:
    name: str  # "tensorflow" | "jax" | "torch" | ...
    source: str  # the target's source names: "file", "declared", "environment", "default"
    origin: str  # why: "this file sets KERAS_BACKEND=jax (line 3)"


@dataclass(frozen=True)
class FileBackend:
    """What the file itself says (part of the file's evidence, hashable)."""

    setting: tuple[str, str, int] | None = None  # (backend, "set" | "default", line) of KERAS_BACKEND in the file
    imports: tuple[str, ...] = ()  # the backends' packages it imports (jax, torch), in that order


def file_backend(nodes: Iterable[ast.AST], modules: Iterable[str], imports_tensorflow: bool) -> FileBackend:
    """The file's KERAS_BACKEND setting (the strongest, then the first line) and the backends it imports."""
    settings = []
    for node in nodes:
        for key, value, how in environ_settings(node):
            name = backend_name(value.value) if isinstance(value, ast.Constant) else None
            if isinstance(key, ast.Constant) and key.value == KERAS_BACKEND_ENV and name is not None:
                settings.append((how != "set", node.lineno, name, how))  # type: ignore[attr-defined]
    setting = None
    if settings:
        _, line, name, how = min(settings)
        setting = (name, how, line)
    roots = {module.split(".")[0] for module in modules}
    imported = () if imports_tensorflow else tuple(b for b in (JAX, TORCH) if b in roots)
    return FileBackend(setting, imported)


def resolve_backend(
    keras_major: int,
    file: FileBackend,
    declared: Iterable[tuple[str, str, str]],
    tensorflow_declared: bool,
    environment: tuple[str, str] | None,
    configured: tuple[str, str] | None = None,
) -> Backend:
    """The sources in order (module docstring). `declared`: (kind, text, origin) of the project's backend
    declarations, nearest first: BACKEND_ENV with the backend as text, or a backend's package."""
    declared = list(declared)
    if keras_major != 3:
        return Backend(TENSORFLOW, "default", "Keras 2 runs on TensorFlow only")
    if configured is not None and (name := backend_name(configured[0])) is not None:
        return Backend(name, "config", configured[1])
    if file.setting is not None and file.setting[1] == "set":
        name, _, line = file.setting
        return Backend(name, "file", f"this file sets {KERAS_BACKEND_ENV}={name} (line {line})")
    for kind, text, origin in declared:
        if kind == BACKEND_ENV:
            return Backend(text, "declared", f"ENV {KERAS_BACKEND_ENV}={text} at {origin}")
    if file.setting is not None:
        name, _, line = file.setting
        return Backend(name, "file", f"this file sets {KERAS_BACKEND_ENV}={name} by default (line {line})")
    if len(file.imports) == 1:
        return Backend(file.imports[0], "file", f"this file imports {file.imports[0]} and not TensorFlow")
    packages = {
        BACKEND_PACKAGES[kind]: (text, origin) for kind, text, origin in reversed(declared) if kind != BACKEND_ENV
    }
    if len(packages) == 1 and not tensorflow_declared:
        ((name, (text, origin)),) = packages.items()
        return Backend(name, "declared", f"the project declares {text} ({origin}) and no TensorFlow")
    if environment is not None:
        return Backend(environment[0], "environment", environment[1])
    return Backend(TENSORFLOW, "default", "Keras's default (nothing sets KERAS_BACKEND)")
