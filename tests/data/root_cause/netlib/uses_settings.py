"""Imports settings.py, whose run fails at its line 6 with nothing to explain it: MP001 here too (the failure is real
wherever it is imported)."""

import tensorflow as tf

from netlib.settings import SETTINGS


def build_model():
    inputs = tf.keras.Input((SETTINGS["width"],))
    return tf.keras.Model(inputs, tf.keras.layers.Dense(2)(inputs))
