"""Helpers, among them the global mixed precision switch."""

import tensorflow as tf


def enable_mixed_precision(force=False):
    """Turns on mixed precision for the whole process; returns whether it did."""
    if not force:
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            tf.get_logger().warning("Mixed precision not enabled: no GPU")
            return False
        details = tf.config.experimental.get_device_details(gpus[0])
        capability = details.get("compute_capability")
        if capability is None or capability < (7, 0):
            tf.get_logger().warning("Mixed precision not enabled: compute capability below 7.0")
            return False
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    return True


def disable_mixed_precision():
    tf.keras.mixed_precision.set_global_policy("float32")


def mixed_precision_enabled():
    return tf.keras.mixed_precision.global_policy().compute_dtype == "float16"
