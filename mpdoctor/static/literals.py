"""Python number literals in the source and what float16 makes of them: the value of `-1e9`, whether an expression
is a float literal (or a list of them), and whether float16 overflows or underflows on a value."""

from __future__ import annotations

import ast

from mpdoctor.facts.dtypes import OVERFLOW as OVERFLOW
from mpdoctor.facts.dtypes import UNDERFLOW as UNDERFLOW
from mpdoctor.facts.dtypes import float16_problem as float16_problem


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
