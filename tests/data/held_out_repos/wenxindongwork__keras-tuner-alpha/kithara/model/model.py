"""The model wrapper's shared helpers: the global precision policy."""

from typing import Optional

import keras


def set_precision(precision: Optional[str] = None, weight_dtype: Optional[str] = None, activation_dtype: Optional[str] = None) -> str:
    """Sets the global dtype policy; must run before the model is loaded."""
    assert (precision is None and weight_dtype is not None and activation_dtype is not None) or (
        precision is not None and weight_dtype is None and activation_dtype is None
    ), "Please only specify either weight and activation dtype, or precision, but not both."

    if precision is None:
        if weight_dtype == activation_dtype:
            precision = weight_dtype
        elif weight_dtype == "float32" and activation_dtype == "float16":
            precision = "mixed_float16"
        elif weight_dtype == "float32" and activation_dtype == "bfloat16":
            precision = "mixed_bfloat16"
        else:
            raise ValueError("Weight dtype and activation dtype combination is not valid.")

    keras.mixed_precision.set_global_policy(precision)
    return precision
