"""A module of a namespace package (no __init__.py) with a relative import: `python -m plugins.vision.backbone`
from the project root imports it and build_model() builds a mixed_float16 model."""
import keras

from .stem import stem


def build_model():
    keras.mixed_precision.set_global_policy("mixed_float16")
    inputs = keras.Input((8,))
    outputs = keras.layers.Dense(2, activation="softmax", dtype="float32")(stem(inputs))
    return keras.Model(inputs, outputs)
