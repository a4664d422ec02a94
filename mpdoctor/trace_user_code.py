"""What the numerics pass saw of user code running in float16 (the traced graphs of user layers and Lambdas), read
for the trace forms of MP403 and MP407: which source lines hold an out-of-range float16 constant, which run an
overflow-prone op in float16, and which compute nothing in float16 at all."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from mpdoctor.facts.dtypes import float16_problem, has_float16_literal
from mpdoctor.static.literals import number
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts, LineConstant, LineOp, UserLayerScan

_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")


def user_layers(facts: Facts) -> list[UserLayerScan]:
    return [layer for _, record in facts.numerics() for layer in record.user_layers if layer.status == "ok"]


def _line_has_literal(ctx: TraceContext, line: int, problem: str) -> bool:
    """Whether the source line holds a float literal float16 cannot represent (`problem`: overflow/underflow), or
    the name of a module constant bound to one (`tf.where(mask, logits, NEG_INF)` in a helper function)."""
    if ctx.static is None or not 0 < line <= len(ctx.static.lines):
        return False
    text = ctx.static.lines[line - 1]
    if has_float16_literal(text, problem):
        return True
    constants = ctx.static.module_constants
    return any(
        name in constants and (value := number(constants[name])) is not None and float16_problem(value) == problem
        for name in _NAME.findall(text)
    )


def constant_problem(constant: LineConstant) -> str:
    return "underflow" if constant.value == "0" else "overflow"


def unsafe_constants(facts: Facts, ctx: TraceContext) -> dict[tuple[int, str], tuple[UserLayerScan, LineConstant]]:
    """Unsafe float16 constants {(line, problem): (layer, constant)} whose source line holds such a literal."""
    return {
        (c.line, constant_problem(c)): (layer, c)
        for layer in user_layers(facts)
        for c in layer.constants
        if _line_has_literal(ctx, c.line, constant_problem(c))
    }


def unsafe_ops(facts: Facts) -> dict[int, list[tuple[UserLayerScan, LineOp]]]:
    """Overflow-prone ops computing in float16 {line: [(layer, op)]}."""
    found: dict[int, list] = {}
    for layer in user_layers(facts):
        for op in layer.ops:
            found.setdefault(op.line, []).append((layer, op))
    return found


def downgrade(layers: list[UserLayerScan], uses: set[int]) -> tuple[str, str] | None:
    """("downgrade", reason) when every use line lies in the code of a traced float16 user layer and no op of that
    graph computing in float16 comes from it (the value never reaches float16 computation), else None."""
    reasons = []
    for line in sorted(uses):
        layer = next(
            (
                layer
                for layer in layers
                if layer.source_lines and layer.source_lines[0] <= line <= layer.source_lines[1]
            ),
            None,
        )
        if layer is None or line in layer.float16_lines:
            return None
        reasons.append(f"line {line} computes nothing in float16 in the traced `{layer.id}`")
    return ("downgrade", "trace: " + "; ".join(reasons)) if reasons else None
