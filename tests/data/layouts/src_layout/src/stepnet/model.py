"""A package module with a relative import: `python src/stepnet/model.py` raises ImportError "attempted relative
import with no known parent package"; `PYTHONPATH=src python -m stepnet.model` imports it and build_model() builds
a 2-layer mixed_float16 model."""
import keras

from .heads import classifier_head


def build_model():
    keras.mixed_precision.set_global_policy("mixed_float16")
    inputs = keras.Input((8,))
    x = keras.layers.Dense(16, activation="relu")(inputs)
    return keras.Model(inputs, classifier_head(x, 3))
