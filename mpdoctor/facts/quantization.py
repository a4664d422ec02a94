"""Keras 3 quantized dtype policies and `quantize()` modes, as data (measured on Keras 3.15.1, TensorFlow backend).

A quantized policy name is `<mode>_from_<source policy>`: "int8_from_float32", "int4/128_from_mixed_bfloat16",
"float8_from_mixed_float16", "gptq/4/128_from_float32" (keras/src/dtype_policies/dtype_policy.py). Which layer
classes support which mode is Keras semantics: `keras_semantics.QUANTIZABLE_LAYERS`.
"""

from __future__ import annotations

from dataclasses import dataclass

QUANTIZATION_MODES = ("int8", "float8", "int4", "gptq", "awq")
# Modes whose quantized kernel is an integer variable with `trainable=False`: `fit` leaves it as it is (measured:
# after `quantize("int8")` two epochs changed only the biases). float8 keeps float32 kernels that train, with
# trainable scales and amax histories.
FROZEN_KERNEL_MODES = ("int8", "int4", "gptq", "awq")
# `quantize(mode)` refuses a layer whose compute dtype is float16 for these modes (Layer._check_quantize_args:
# "Quantization mode='int8' doesn't work well with compute_dtype='float16'"); int4 and float8 accept it.
FLOAT16_REFUSED_MODES = ("int8",)


@dataclass(frozen=True)
class QuantizedPolicy:
    name: str
    mode: str  # "int8", "int4", "float8", "gptq", "awq" (a block size or bit width after "/" dropped)
    source: str  # the policy it was quantized from: "float32", "mixed_bfloat16", ...


def quantized_policy(name: object) -> QuantizedPolicy | None:
    """The quantized policy a policy name denotes, or None for any other name or value."""
    if not isinstance(name, str):
        return None
    mode, sep, source = name.partition("_from_")
    base_mode = mode.split("/", 1)[0]
    if not sep or base_mode not in QUANTIZATION_MODES or not source:
        return None
    return QuantizedPolicy(name, base_mode, source)


def quantize_mode(value: object) -> str | None:
    """The quantization mode a `quantize(mode)` argument names, or None."""
    return value if isinstance(value, str) and value in QUANTIZATION_MODES else None
