"""Dtype policies as the static pass sees them: the calls that set or make one, and the policy an expression
denotes."""

from __future__ import annotations

import ast

from mpdoctor.facts.dtypes import KNOWN_POLICIES, dtype_name
from mpdoctor.static.astutil import keyword_value
from mpdoctor.static.names import ImportMap

# canonical call names that set the global policy, and whether their argument is a floatx (pure dtype).
POLICY_SETTERS = {
    "keras.mixed_precision.set_global_policy": False,
    "keras.mixed_precision.set_dtype_policy": False,
    "keras.config.set_dtype_policy": False,
    "keras.mixed_precision.experimental.set_policy": False,
    "keras.backend.set_floatx": True,
    "keras.config.set_floatx": True,
}

POLICY_CONSTRUCTORS = (
    "keras.mixed_precision.Policy",
    "keras.mixed_precision.DTypePolicy",
    "keras.mixed_precision.experimental.Policy",
    "keras.DTypePolicy",
    "keras.dtype_policies.DTypePolicy",
)

_TF_DTYPE_NAMES = {"float16", "half", "bfloat16", "float32", "float", "float64", "double"}


def policy_from_expr(
    expr: ast.AST | None, imports: ImportMap, constants: dict[str, ast.AST] | None = None, _depth: int = 0
) -> str | None:
    """The policy name an expression denotes (`"mixed_float16"`, `tf.float32`, `Policy("float16")`, a module
    constant holding one of those), or None when it cannot be known statically."""
    if expr is None or _depth > 5:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        value = dtype_name(expr.value)
        return value if value in KNOWN_POLICIES else None
    if isinstance(expr, ast.Call):
        name = imports.resolve(expr.func)
        if name in POLICY_CONSTRUCTORS:
            arg = expr.args[0] if expr.args else keyword_value(expr, "name")
            return policy_from_expr(arg, imports, constants, _depth + 1)
        return None
    name = imports.resolve(expr)
    if name and constants and name in constants:  # a constant of another project module (`benchmark.FLOAT_A100`)
        return policy_from_expr(constants[name], imports, constants, _depth + 1)
    if name:
        last = name.rsplit(".", 1)[-1]
        if name.startswith(("tf.", "np.")) and last in _TF_DTYPE_NAMES:
            return dtype_name(last)
        return None
    if isinstance(expr, ast.Name) and constants and expr.id in constants:
        return policy_from_expr(constants[expr.id], imports, constants, _depth + 1)
    return None


def dtype_keyword(call: ast.Call) -> ast.AST | None:
    return keyword_value(call, "dtype")
