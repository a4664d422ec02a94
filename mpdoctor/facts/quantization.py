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


# The variables a quantized layer saves besides its float ones (Keras 3.15.1, measured: `save_weights` of a quantized
# Dense / EinsumDense / Embedding, the names its `load_own_variables` expects). A `.weights.h5` stores them by index
# only, so a model and a file quantized differently meet as "Layer 'dense' expected 2 variables, but received 3".
QUANTIZED_EXTRA_VARIABLES: dict[str, tuple[str, ...]] = {
    "int8": ("kernel_scale",),  # Embedding: embeddings_scale
    "int4": ("kernel_scale", "kernel_zero", "g_idx"),  # Embedding: embeddings_scale, embeddings_zero, g_idx
    "float8": (
        "inputs_scale",
        "inputs_amax_history",
        "kernel_scale",
        "kernel_amax_history",
        "outputs_grad_scale",
        "outputs_grad_amax_history",
    ),
}


def mode_of_variables(names: list[str]) -> str | None:
    """The quantization mode a layer's variable names show (its `load_own_variables` list), or None for a float
    layer."""
    if any(name.endswith("amax_history") for name in names):
        return "float8"
    if any(name == "g_idx" or name.endswith("_zero") for name in names):
        return "int4"
    if any(name in ("kernel_scale", "embeddings_scale") for name in names):
        return "int8"
    return None


def mode_of_extra_count(extra: int) -> str | None:
    """The mode whose quantized layer saves `extra` more variables than the float layer, or None."""
    return next((mode for mode, names in QUANTIZED_EXTRA_VARIABLES.items() if len(names) == extra), None)


@dataclass(frozen=True)
class QuantizedLayerWeights:
    """A layer of a Keras 3 weights file whose variables are a quantized layer's."""

    layer: str  # the key prefix: "layers/dense"
    mode: str  # "int8" | "int4" | "float8"
    variables: int


# A float8 layer's amax histories: `amax_history_length` defaults to 1024; a shorter one is still a history.
_MIN_AMAX_HISTORY = 16


def quantized_layers(variables: list[tuple[str, str | None, list[int] | None]]) -> list[QuantizedLayerWeights]:
    """The quantized layers of a Keras 3 `.weights.h5` (or a `.keras` archive's weights), from (key, dtype, shape)
    rows keyed `<layer path>/vars/<index>`. Measured layouts (Keras 3.15.1): int8 is one int8 variable (the
    kernel or embeddings) beside float32 scales; int4 two (the packed kernel and its zero points) beside
    float32 scales and `g_idx`; float8 float32 kernels with three scalar scales and three equal 1-D amax
    histories."""
    groups: dict[str, list[tuple[str | None, list[int] | None]]] = {}
    for key, dtype, shape in variables:
        layer, sep, _ = key.rpartition("/vars/")
        if sep:
            groups.setdefault(layer, []).append((dtype, shape))
    found = []
    for layer, rows in groups.items():
        mode = _layer_mode(rows)
        if mode is not None:
            found.append(QuantizedLayerWeights(layer, mode, len(rows)))
    return found


def _layer_mode(rows: list[tuple[str | None, list[int] | None]]) -> str | None:
    integers = sum(dtype == "int8" for dtype, _ in rows)
    floats = [shape for dtype, shape in rows if dtype == "float32"]
    if integers and floats:
        return "int8" if integers == 1 else "int4" if integers == 2 else None
    scalars = sum(shape == [] for shape in floats)
    histories = [s[0] for s in floats if s is not None and len(s) == 1 and s[0] >= _MIN_AMAX_HISTORY]
    if not integers and scalars == 3 and len(histories) == 3 and len(set(histories)) == 1:
        return "float8"
    return None
