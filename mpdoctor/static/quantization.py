"""Keras 3 quantization as the static pass sees it: quantized policies a file spells, its `quantize(mode)` calls and
what they are called on. Shared by the MP7xx rules."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mpdoctor.facts.keras_semantics import QUANTIZED_POLICY_CLASSES
from mpdoctor.facts.quantization import QuantizedPolicy, quantize_mode, quantized_policy
from mpdoctor.static.astutil import keyword_value
from mpdoctor.static.policies import POLICY_CONSTRUCTORS

if TYPE_CHECKING:
    from mpdoctor.static.context import StaticContext


def quantized_policy_of(ctx: StaticContext, expr: ast.AST | None, depth: int = 0) -> QuantizedPolicy | None:
    """The quantized policy an expression denotes: a literal `"int8_from_float32"`, `DTypePolicy("int8_from_...")`,
    `QuantizedDTypePolicy("int8", "float32")`, or a name bound to one of those; None otherwise."""
    if expr is None or depth > 5:
        return None
    if isinstance(expr, ast.Constant):
        return quantized_policy(expr.value)
    if isinstance(expr, ast.Name):
        value = ctx.last_assignment(expr.id, expr) or ctx.module_constants.get(expr.id)
        return quantized_policy_of(ctx, value, depth + 1) if value is not expr else None
    if not isinstance(expr, ast.Call):
        return None
    name = ctx.call_name(expr) or ""
    if name in POLICY_CONSTRUCTORS:
        return quantized_policy_of(ctx, expr.args[0] if expr.args else keyword_value(expr, "name"), depth + 1)
    if name.rsplit(".", 1)[-1] in QUANTIZED_POLICY_CLASSES and name.startswith("keras."):
        mode = _literal(expr.args[0] if expr.args else keyword_value(expr, "mode"))
        source = _literal(expr.args[1] if len(expr.args) > 1 else keyword_value(expr, "source_name")) or "float32"
        return quantized_policy(f"{mode}_from_{source}") if mode else None
    return None


@dataclass(frozen=True)
class QuantizeCall:
    """A `<receiver>.quantize(mode)` call with a mode the file spells."""

    node: ast.Call
    mode: str
    receiver: ast.expr  # what `.quantize` is called on
    receiver_name: str | None  # its name when it is a plain name (`model`)


def quantize_calls(ctx: StaticContext) -> list[QuantizeCall]:
    """The file's `x.quantize("int8")`-style calls (Keras 3 only: `quantize` means nothing to tf_keras models)."""
    if not ctx.is_keras3:
        return []
    found = []
    for call in ctx.method_calls("quantize"):
        func = call.func
        if not isinstance(func, ast.Attribute):
            continue
        mode = quantize_mode(_literal(call.args[0] if call.args else keyword_value(call, "mode")))
        if mode is None:
            continue
        name = func.value.id if isinstance(func.value, ast.Name) else None
        found.append(QuantizeCall(call, mode, func.value, name))
    return found


def _literal(expr: ast.AST | None) -> str | None:
    return expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else None
