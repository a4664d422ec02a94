"""Which Keras 3 backend a run means (TensorFlow, JAX or PyTorch), decided as Keras decides it plus the project's
own setting: `KERAS_BACKEND` in the environment, else `[tool.mpdoctor] keras-backend`, else the `backend` of
`keras.json` (in `KERAS_HOME`, else `~/.keras`), else TensorFlow. The environment wins as it does in Keras: it is
what the user runs now; the project's setting comes before keras.json, a per-user default shared by every project.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from mpdoctor.facts.keras_backends import BACKEND_ENV, CONFIG_KEY, TENSORFLOW
from mpdoctor.project.environment import keras_json_backend, keras_json_path


@dataclass(frozen=True)
class BackendChoice:
    name: str  # "tensorflow", "jax", "torch" (or a backend the trace does not run on)
    origin: (
        str | None
    )  # where it was set ("KERAS_BACKEND", "[tool.mpdoctor] keras-backend", a keras.json); None: default

    @property
    def tensorflow(self) -> bool:
        return self.name == TENSORFLOW


def chosen_backend(configured: str | None, environ: Mapping[str, str] | None = None) -> BackendChoice:
    """The backend of a run: KERAS_BACKEND, else the project's setting, else keras.json, else TensorFlow."""
    environ = os.environ if environ is None else environ
    if environ.get(BACKEND_ENV):
        return BackendChoice(environ[BACKEND_ENV], BACKEND_ENV)
    if configured:
        return BackendChoice(configured, f"[tool.mpdoctor] {CONFIG_KEY}")
    path = keras_json_path(environ)
    found = keras_json_backend(path)
    if found is not None:
        return BackendChoice(found, path)
    return BackendChoice(TENSORFLOW, None)
