import functools
import os

_KERAS_FRAMEWORK_NAME = "keras"
_TF_KERAS_FRAMEWORK_NAME = "tf.keras"
_DEFAULT_KERAS_FRAMEWORK = _KERAS_FRAMEWORK_NAME
_KERAS_FRAMEWORK = None
_KERAS_BACKEND = None
_KERAS_LAYERS = None
_KERAS_MODELS = None
_KERAS_UTILS = None


def inject_global_submodules(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        kwargs["backend"] = _KERAS_BACKEND
        kwargs["layers"] = _KERAS_LAYERS
        kwargs["models"] = _KERAS_MODELS
        kwargs["utils"] = _KERAS_UTILS
        return func(*args, **kwargs)

    return wrapper


def framework():
    return _KERAS_FRAMEWORK


def set_framework(name):
    """Sets the framework: `keras` or `tf.keras` (case insensitive)."""
    name = name.lower()
    if name == _KERAS_FRAMEWORK_NAME:
        import efficientnet.keras  # noqa: F401  (init custom objects)
        import keras
    elif name == _TF_KERAS_FRAMEWORK_NAME:
        import efficientnet.tfkeras  # noqa: F401  (init custom objects)
        from tensorflow import keras
    else:
        raise ValueError("Not correct module name `{}`, use `{}` or `{}`".format(name, _KERAS_FRAMEWORK_NAME, _TF_KERAS_FRAMEWORK_NAME))
    global _KERAS_BACKEND, _KERAS_LAYERS, _KERAS_MODELS, _KERAS_UTILS, _KERAS_FRAMEWORK
    _KERAS_FRAMEWORK = name
    _KERAS_BACKEND = keras.backend
    _KERAS_LAYERS = keras.layers
    _KERAS_MODELS = keras.models
    _KERAS_UTILS = keras.utils


_framework = os.environ.get("SM_FRAMEWORK", _DEFAULT_KERAS_FRAMEWORK)
try:
    set_framework(_framework)
except ImportError:
    other = _TF_KERAS_FRAMEWORK_NAME if _framework == _KERAS_FRAMEWORK_NAME else _KERAS_FRAMEWORK_NAME
    set_framework(other)

print("Segmentation Models: using `{}` framework.".format(_KERAS_FRAMEWORK))

from .backbones.backbones_factory import Backbones  # noqa: E402
from .models.unet import Unet as _Unet  # noqa: E402

Unet = inject_global_submodules(_Unet)
get_available_backbone_names = Backbones.models_names


def get_preprocessing(name):
    return Backbones.get_preprocessing(name)
