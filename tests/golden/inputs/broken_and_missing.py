"""Golden input: a SavedModel handle that does not exist (MP202) and a builder that raises (MP001)."""
import tensorflow as tf
import tensorflow_hub as hub
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")


def build_model():
    inputs = keras.Input((3,))
    features = hub.KerasLayer("savedmodels/not_there", dtype="float32")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, dtype="float32")(features))


def build_other():
    raise RuntimeError("the dataset path is not configured")
