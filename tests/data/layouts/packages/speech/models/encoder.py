"""A module two packages deep with a parent-relative import: run as a file it raises ImportError "attempted
relative import with no known parent package"; `python -m speech.models.encoder` from the project root imports it,
and build_model() builds a mixed_float16 model."""
import keras

from ..layers.blocks import dense_block


def build_model():
    keras.mixed_precision.set_global_policy("mixed_float16")
    inputs = keras.Input((8,))
    outputs = keras.layers.Dense(4, activation="softmax", dtype="float32")(dense_block(inputs, 16))
    return keras.Model(inputs, outputs)
