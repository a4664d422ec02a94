# Abridged excerpt (see SOURCE.md): get_precision() of google/automl efficientdet/utils.py.
import tensorflow as tf


def get_precision(strategy: str, mixed_precision: bool = False):
    """Get the precision policy for a given strategy."""
    if mixed_precision:
        if strategy == "tpu":
            return "mixed_bfloat16"
        if tf.config.list_physical_devices("GPU"):
            return "mixed_float16"
        return "float32"
    return "float32"
