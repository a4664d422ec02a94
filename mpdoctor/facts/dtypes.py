"""Dtype and dtype-policy names, as mpdoctor spells them everywhere: tf.DType names ("float16", never TF's C++
"half"), policy names ("mixed_float16")."""

from __future__ import annotations

import math
import re
import struct
from typing import Any, TypeGuard

KNOWN_POLICIES = ("mixed_float16", "mixed_bfloat16", "float16", "bfloat16", "float32", "float64")
PLAN_POLICIES = ("mixed_float16", "mixed_bfloat16")  # what `mpdoctor plan --policy` accepts
LOW_PRECISION = ("float16", "bfloat16")  # "float16 compute" in the rule catalogue means either
FLOATS = ("float16", "bfloat16", "float32", "float64")
FLOAT16_MAX = 65504.0
FLOAT16_MIN_NORMAL = 6.103515625e-05
FLOAT16_MIN_SUBNORMAL = 5.960464477539063e-08
# TF's C++ names and Python's builtin spellings of the float dtypes.
_ALIASES = {"half": "float16", "float": "float32", "double": "float64"}


def compute_dtype(policy: str | None) -> str | None:
    """`mixed_float16` -> `float16`, `float32` -> `float32`; None stays None."""
    if policy is None:
        return None
    return policy.removeprefix("mixed_")


def is_float16_compute(policy: str | None) -> bool:
    """Whether a policy (or a plain dtype name) computes in float16 or bfloat16."""
    return compute_dtype(policy) in LOW_PRECISION


def low_precision(dtype: str | None) -> TypeGuard[str]:
    """float16 or bfloat16 (then a dtype name, not None)."""
    return dtype in LOW_PRECISION


def is_float(dtype: str | None) -> bool:
    return dtype is not None and dtype.startswith(("float", "bfloat"))


def canonical_dtype_text(text: str) -> str:
    """A dtype as an error message or a source spells it: 'half' / 'tf.float16' / "'float16'" -> 'float16'."""
    text = text.strip().strip("'\"").removeprefix("tf.")
    return _ALIASES.get(text, text)


def dtype_name(value: Any) -> str | None:
    """The canonical name of a dtype-like value: a str ('half' -> 'float16'; policy names pass through), a tf.DType,
    a torch.dtype, a NumPy dtype or type, a Keras dtype policy (its name)."""
    if value is None:
        return None
    if isinstance(value, str):
        return _ALIASES.get(value, value)
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return _ALIASES.get(name, name)
    text = str(value)
    if text.startswith("torch."):  # a torch.dtype (Keras on PyTorch): torch.float16, torch.bfloat16
        return _ALIASES.get(text[6:], text[6:])
    try:
        import numpy as np

        return str(np.dtype(value).name)
    except Exception:
        return str(value)


# Share of the gradient values that are nonzero in float32 but zero or non-finite under the policy above which a
# training step's gradients count as underflowing (MP504 reports it, `mpdoctor plan` acts on it). Measured on TF 2.21:
# the catalogue's custom loop without loss scaling flushes 100 %; the same loop with a LossScaleOptimizer 1.5 % (the
# first layer's gradients, four orders of magnitude smaller again, still flush at 2**15). 10 % keeps such tails quiet.
GRADIENT_FLUSH_THRESHOLD = 0.10


# ------------------------------------------------------------------------------------------ float16's range

OVERFLOW = "overflow"
UNDERFLOW = "underflow"
_FLOAT16_OVERFLOWS = 65520.0  # the smallest magnitude float16 rounds to infinity (65504 is its largest finite)
_FLOAT_LITERAL = re.compile(r"(?<![\w.])\d+\.?\d*[eE][-+]?\d+|(?<![\w.])\d+\.\d+")


def float16_problem(value: float) -> str | None:
    """'overflow' / 'underflow' when float16 cannot represent `value` (exact IEEE rounding, via struct 'e')."""
    if _FLOAT16_OVERFLOWS <= abs(value) < math.inf:  # what struct refuses, without its exception (most cases)
        return OVERFLOW
    try:
        rounded = struct.unpack("e", struct.pack("e", value))[0]
    except OverflowError:
        return OVERFLOW
    if value != 0.0 and rounded == 0.0:
        return UNDERFLOW
    return None


def has_float16_literal(text: str, problem: str) -> bool:
    """Whether a line of source holds a float literal float16 cannot represent (`problem`: overflow/underflow): a
    float16 constant that is 0 or inf in a traced graph comes from such a literal, not from a 0 the code meant."""
    return any(float16_problem(float(literal)) == problem for literal in _FLOAT_LITERAL.findall(text))
