"""CRNN text recognizer (reduced: the spatial transformer and CTC decoding left out)."""

import string

import tensorflow as tf
from tensorflow import keras

from . import tools  # noqa: F401

DEFAULT_BUILD_PARAMS = {"height": 31, "width": 200, "color": False, "filters": (16, 32), "rnn_units": (32, 32), "dropout": 0.25, "rnn_steps_to_discard": 2, "pool_size": 2, "stn": False}
DEFAULT_ALPHABET = string.digits + string.ascii_lowercase
PRETRAINED_WEIGHTS = {"kurapan": {"alphabet": DEFAULT_ALPHABET, "build_params": DEFAULT_BUILD_PARAMS, "weights": None}}


def build_model(alphabet, height, width, color, filters, rnn_units, dropout, rnn_steps_to_discard, pool_size, stn=True):
    inputs = keras.layers.Input((height, width, 3 if color else 1))
    x = keras.layers.Permute((2, 1, 3))(inputs)
    x = keras.layers.Lambda(lambda x: x[:, :, ::-1])(x)
    for i, f in enumerate(filters):
        x = keras.layers.Conv2D(f, (3, 3), activation="relu", padding="same", name="conv_%d" % (i + 1))(x)
        x = keras.layers.BatchNormalization(name="bn_%d" % (i + 1))(x)
        x = keras.layers.MaxPooling2D(pool_size=(pool_size, pool_size), name="maxpool_%d" % (i + 1))(x)
    x = keras.layers.Reshape(target_shape=(width // pool_size**len(filters), (height // pool_size**len(filters)) * filters[-1]), name="reshape")(x)
    x = keras.layers.Dense(rnn_units[0], activation="relu", name="fc_9")(x)
    x = keras.layers.Bidirectional(keras.layers.LSTM(rnn_units[0], return_sequences=True), name="lstm_10")(x)
    x = keras.layers.Dropout(dropout)(x)
    x = keras.layers.Dense(len(alphabet) + 1, kernel_initializer="he_normal", activation="softmax", name="fc_12")(x)
    x = keras.layers.Lambda(lambda x: x[:, rnn_steps_to_discard:])(x)
    model = keras.models.Model(inputs=inputs, outputs=x)
    backbone = keras.models.Model(inputs=inputs, outputs=model.layers[-4].output)
    return backbone, model


class Recognizer:
    """A text recognizer using the CRNN architecture."""

    def __init__(self, alphabet=None, weights="kurapan", build_params=None):
        assert alphabet or weights, "At least one of alphabet or weights must be provided."
        if weights is not None:
            build_params = build_params or PRETRAINED_WEIGHTS[weights]["build_params"]
            alphabet = alphabet or PRETRAINED_WEIGHTS[weights]["alphabet"]
        build_params = build_params or DEFAULT_BUILD_PARAMS
        self.alphabet = alphabet or DEFAULT_ALPHABET
        self.backbone, self.model = build_model(alphabet=self.alphabet, **build_params)

    def compile(self, *args, **kwargs):
        if "optimizer" not in kwargs:
            kwargs["optimizer"] = "RMSprop"
        if "loss" not in kwargs:
            kwargs["loss"] = lambda _, y_pred: tf.reduce_mean(y_pred)
        self.model.compile(*args, **kwargs)
