"""Imports a module of the project's own package that does not exist (a real bug, not the environment): running
it raises ModuleNotFoundError: No module named 'helpers.metrics' at line 4."""
import keras
from helpers.metrics import f1_score

keras.mixed_precision.set_global_policy("mixed_float16")


def build_model():
    inputs = keras.Input((8,))
    outputs = keras.layers.Dense(2, activation="softmax", dtype="float32")(inputs)
    model = keras.Model(inputs, outputs)
    model.compile("adam", "categorical_crossentropy", metrics=[f1_score])
    return model
