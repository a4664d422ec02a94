"""Imports helpers.metrics, a module the project's own package lacks: a bug of the code, never stood in for
(ModuleNotFoundError: No module named 'helpers.metrics' at line 6, MP001 with or without stand-ins)."""

import keras
import mpdoctor_fixture_tracker  # noqa: F401
import helpers.metrics  # noqa: F401


def build_model():
    return keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(2)])
