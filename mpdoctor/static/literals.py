"""Python number literals in the source and what float16 makes of them: the value of `-1e9`, whether an expression
is a float literal (or a list of them), and whether float16 overflows or underflows on a value."""

from __future__ import annotations

import ast
import math
import struct

OVERFLOW = "overflow"
UNDERFLOW = "underflow"
_FLOAT16_OVERFLOWS = 65520.0  # the smallest magnitude float16 rounds to infinity (65504 is its largest finite)


def number(node: ast.AST | None) -> float | None:
    sign = 1.0
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -sign if isinstance(node.op, ast.USub) else sign
        node = node.operand
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return sign * float(node.value)
    return None


def is_float_literal(node: ast.AST | None) -> bool:
    if isinstance(node, (ast.List, ast.Tuple)):
        return (
            bool(node.elts)
            and any(is_float_literal(e) for e in node.elts)
            and all(number(e) is not None or is_float_literal(e) for e in node.elts)
        )
    inner = node
    while isinstance(inner, ast.UnaryOp):
        inner = inner.operand
    return isinstance(inner, ast.Constant) and isinstance(inner.value, float)


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
