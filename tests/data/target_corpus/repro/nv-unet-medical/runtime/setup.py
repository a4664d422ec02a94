import tensorflow as tf


def set_flags(use_amp):
    if use_amp:
        tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
