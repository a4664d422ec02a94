# Abridged excerpt (see SOURCE.md): tensorflow/models official/modeling/performance.py.
"""Functions and classes related to training performance."""

import tensorflow as tf


def set_mixed_precision_policy(dtype, loss_scale=None):
    """Sets the global `tf.keras.mixed_precision.Policy`."""
    if dtype == tf.float16:
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
    elif dtype == tf.bfloat16:
        tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    elif dtype == tf.float32:
        tf.keras.mixed_precision.set_global_policy("float32")
    else:
        raise ValueError("Unexpected dtype: %s" % dtype)
