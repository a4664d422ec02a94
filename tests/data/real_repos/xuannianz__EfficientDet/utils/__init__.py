import functools

import cv2  # noqa: F401
import numpy as np  # noqa: F401

_KERAS_BACKEND = None
_KERAS_LAYERS = None
_KERAS_MODELS = None
_KERAS_UTILS = None


def get_submodules_from_kwargs(kwargs):
    return kwargs.get("backend", _KERAS_BACKEND), kwargs.get("layers", _KERAS_LAYERS), kwargs.get("models", _KERAS_MODELS), kwargs.get("utils", _KERAS_UTILS)


def inject_tfkeras_modules(func):
    import tensorflow.keras as tfkeras

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        kwargs["backend"] = tfkeras.backend
        kwargs["layers"] = tfkeras.layers
        kwargs["models"] = tfkeras.models
        kwargs["utils"] = tfkeras.utils
        return func(*args, **kwargs)

    return wrapper


def init_tfkeras_custom_objects():
    return None
