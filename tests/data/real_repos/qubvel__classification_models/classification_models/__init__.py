import keras_applications as ka

from .__version__ import __version__  # noqa: F401


def get_submodules_from_kwargs(kwargs):
    backend = kwargs.get("backend", ka._KERAS_BACKEND)
    layers = kwargs.get("layers", ka._KERAS_LAYERS)
    models = kwargs.get("models", ka._KERAS_MODELS)
    utils = kwargs.get("utils", ka._KERAS_UTILS)
    return backend, layers, models, utils
