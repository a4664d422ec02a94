"""Which Keras 3 backend a run means (TensorFlow, JAX or PyTorch), decided as Keras decides it plus the project's
own setting: `KERAS_BACKEND` in the environment, else `[tool.mpdoctor] keras-backend`, else the `backend` of
`keras.json` (in `KERAS_HOME`, else `~/.keras`), else TensorFlow. The environment wins as it does in Keras: it is
what the user runs now; the project's setting comes before keras.json, a per-user default shared by every project.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from mpdoctor.facts.keras_backends import BACKEND_ENV, CONFIG_KEY, TENSORFLOW
from mpdoctor.reads import read_text

_KERAS_JSON_LIMIT = 1 << 20


@dataclass(frozen=True)
class BackendChoice:
    name: str  # "tensorflow", "jax", "torch" (or a backend the trace does not run on)
    origin: (
        str | None
    )  # where it was set ("KERAS_BACKEND", "[tool.mpdoctor] keras-backend", a keras.json); None: default

    @property
    def tensorflow(self) -> bool:
        return self.name == TENSORFLOW


def keras_json(environ: Mapping[str, str]) -> str:
    """The keras.json Keras reads: in KERAS_HOME, else ~/.keras."""
    home = environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return os.path.join(home, "keras.json")


def keras_json_backend(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(backend, path) as keras.json sets it; None without a readable one (Keras then ignores it too)."""
    path = keras_json(environ)
    try:
        document = json.loads(read_text(path, _KERAS_JSON_LIMIT, "keras.json"))
    except (OSError, ValueError):
        return None
    backend = document.get("backend") if isinstance(document, dict) else None
    return (backend, path) if isinstance(backend, str) and backend else None


def chosen_backend(configured: str | None, environ: Mapping[str, str] | None = None) -> BackendChoice:
    """The backend of a run: KERAS_BACKEND, else the project's setting, else keras.json, else TensorFlow."""
    environ = os.environ if environ is None else environ
    if environ.get(BACKEND_ENV):
        return BackendChoice(environ[BACKEND_ENV], BACKEND_ENV)
    if configured:
        return BackendChoice(configured, f"[tool.mpdoctor] {CONFIG_KEY}")
    found = keras_json_backend(environ)
    if found is not None:
        return BackendChoice(found[0], found[1])
    return BackendChoice(TENSORFLOW, None)
