"""The Keras 3 port of tf_keras loss scaling (MP103): `opt.get_scaled_loss(loss)` -> `opt.scale_loss(loss)` and
`opt.get_unscaled_gradients(grads)` -> `grads` (the LossScaleOptimizer's apply unscales on Keras 3).

The two halves are one change (issue 30): a port that rewrites the scaling and leaves the unscaling raises
AttributeError at the first step, and one that drops the unscaling but keeps get_scaled_loss raises at the
first. So within one class (or, outside classes, one module) either every half is rewritten or none is, and each
refused half says why. `hasattr` shims are read as Keras 3 runs them: `opt.get_scaled_loss(loss) if hasattr(opt,
"get_scaled_loss") else loss` never scales there (the LossScaleOptimizer then divides gradients of an unscaled loss
by 2**15), so its fix gives the other arm `opt.scale_loss(loss)` (then it scales on both Keras lines), or where
there is no such arm renames the guard with the call; a guarded get_unscaled_gradients is already skipped there,
which is what Keras 3 needs."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from mpdoctor.diagnostics import Edit, Fix
from mpdoctor.static.context import StaticContext
from mpdoctor.static.gradient_flow import refusal, scaled_consumer
from mpdoctor.static.tree_index import FUNCTION_NODES

SCALE, UNSCALE = "get_scaled_loss", "get_unscaled_gradients"
_NOT_FIXED = "not fixed automatically: "


@dataclass(frozen=True)
class PortHalf:
    """One tf_keras loss-scaling call to port to Keras 3."""

    call: ast.Call
    fix: Fix | None
    refused: str | None  # why it has no fix ("not fixed automatically: ..."), None when it has one
    guard: ast.Call | None = None  # `hasattr(opt, "get_scaled_loss")`, False on Keras 3: the call never runs


def port_halves(ctx: StaticContext, *, fixable_target: bool) -> list[PortHalf]:
    """The calls of the port, in source order; `fixable_target`: the target is certainly Keras 3 (else no fix:
    scale_loss does not exist on the Keras 2 part of the target)."""
    defined = {n.name for n in ctx.nodes_of(*FUNCTION_NODES)}
    clipped = _unscaling_refusals(ctx)
    halves: list[PortHalf] = []
    for call in ctx.method_calls(SCALE, UNSCALE):
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr in defined:
            continue
        guard = _hasattr_guard(ctx, call)
        if guard is not None and (func.attr == UNSCALE or _other_arm_scales(ctx, call, guard)):
            continue  # a shim that does on Keras 3 what Keras 3 needs
        fix, why = _own_fix(ctx, call, guard), clipped.get(call)
        if not fixable_target:
            why = why or _NOT_FIXED + "the target includes Keras 2, where optimizers have no scale_loss"
        elif fix is None:
            why = why or _NOT_FIXED + f"{ctx.segment(func)}() is not called with one loss or gradient list"
        halves.append(PortHalf(call, None if why else fix, why, guard))
    return _both_or_neither(ctx, halves)


def _own_fix(ctx: StaticContext, call: ast.Call, guard: ast.Call | None) -> Fix | None:
    func = call.func
    assert isinstance(func, ast.Attribute)
    if len(call.args) != 1 or call.keywords or isinstance(call.args[0], ast.Starred):
        return None
    if func.attr == UNSCALE:
        return Fix(
            "drop the unscaling: apply_gradients unscales on Keras 3",
            (ctx.edit(call, ctx.segment(call.args[0])),),
            changes_training=True,
        )
    if guard is not None:
        shim = _scaling_arm(ctx, call, guard)
        if shim is not None:
            return shim
    edits = [ctx.edit(func, f"{ctx.segment(func.value)}.scale_loss")]
    if guard is not None:  # the guard must test the method the call now makes
        name = guard.args[1]
        edits.append(ctx.edit(name, ctx.segment(name).replace(SCALE, "scale_loss")))
    return Fix("use scale_loss", tuple(sorted(edits, key=lambda e: (e.line, e.column))), changes_training=True)


def _scaling_arm(ctx: StaticContext, call: ast.Call, guard: ast.Call) -> Fix | None:
    """A shim whose other arm leaves the loss as it is gets that arm scaled with scale_loss, so that it scales on
    both Keras lines: `get_scaled_loss(loss) if hasattr(...) else loss` -> `... else opt.scale_loss(loss)`, and
    `if hasattr(...): loss = opt.get_scaled_loss(loss)` gains `else: loss = opt.scale_loss(loss)`."""
    owner, loss = ctx.segment(call.func.value), ctx.segment(call.args[0])  # type: ignore[attr-defined]
    scaled = f"{owner}.scale_loss({loss})"
    description = "scale the loss with scale_loss where get_scaled_loss does not exist (Keras 3)"
    holder = ctx.parents.get(guard)
    if isinstance(holder, ast.IfExp) and holder.body is call and ctx.segment(holder.orelse) == loss:
        return Fix(description, (ctx.edit(holder.orelse, scaled),), changes_training=True)
    if not (isinstance(holder, ast.If) and not holder.orelse and len(holder.body) == 1):
        return None
    stmt = holder.body[0]
    if not (isinstance(stmt, ast.Assign) and stmt.value is call and len(stmt.targets) == 1):
        return None
    indent, body_indent = (ctx.lines[n.lineno - 1][: n.col_offset] for n in (holder, stmt))
    if indent.strip() or body_indent.strip() or stmt.lineno == holder.lineno:
        return None
    clause = f"{indent}else:\n{body_indent}{ctx.segment(stmt.targets[0])} = {scaled}"
    line = stmt.end_lineno or stmt.lineno
    if line < len(ctx.lines):
        edit = Edit(ctx.display_path, line + 1, 1, line + 1, 1, clause + "\n")
    else:
        column = len(ctx.lines[line - 1].encode()) + 1
        edit = Edit(ctx.display_path, line, column, line, column, "\n" + clause)
    return Fix(description, (edit,), changes_training=True)


def _both_or_neither(ctx: StaticContext, halves: list[PortHalf]) -> list[PortHalf]:
    """Within one class (or one module, outside classes), every half loses its fix when one cannot be made: the
    refused ones keep their reason, the others take it."""
    groups: dict[ast.AST, list[PortHalf]] = {}
    for half in halves:
        groups.setdefault(ctx.enclosing_class(half.call) or ctx.tree, []).append(half)
    result = []
    for group in groups.values():
        refused = [h for h in group if h.refused]
        for half in group:
            if not refused or half.refused:
                result.append(half)
                continue
            blocking = _nearest(ctx, half, refused)
            why = blocking.refused or ""
            if blocking.call.func.attr == half.call.func.attr or not _same_reason_scope(ctx, half, blocking):  # type: ignore[attr-defined]
                why = f"{why} (the {blocking.call.func.attr} call at line {blocking.call.lineno} is not ported)"  # type: ignore[attr-defined]
            result.append(PortHalf(half.call, None, why, half.guard))
    return sorted(result, key=lambda h: (h.call.lineno, h.call.col_offset))


def _nearest(ctx: StaticContext, half: PortHalf, refused: list[PortHalf]) -> PortHalf:
    """The refused half that blocks this one: of its own function, else of the same optimizer, else the first."""
    owner = ctx.segment(half.call.func.value)  # type: ignore[attr-defined]
    return (
        next((h for h in refused if _same_reason_scope(ctx, half, h)), None)
        or next((h for h in refused if ctx.segment(h.call.func.value) == owner), None)  # type: ignore[attr-defined]
        or refused[0]
    )


def _same_reason_scope(ctx: StaticContext, half: PortHalf, blocking: PortHalf) -> bool:
    """The two halves of one function's loop: its reason reads as the loop's own."""
    return ctx.enclosing_function(half.call) is ctx.enclosing_function(blocking.call)


def _unscaling_refusals(ctx: StaticContext) -> dict[ast.AST, str]:
    """Why dropping a get_unscaled_gradients call would be wrong: on Keras 3 only the LossScaleOptimizer's apply
    unscales, so gradients that are clipped, accumulated, all-reduced or applied through the inner optimizer on the
    way would stay 2**15 times too large there (mpdoctor.static.gradient_flow)."""
    refused: dict[ast.AST, str] = {}
    for call in ctx.method_calls(UNSCALE):
        scope = ctx.enclosing_function(call) or ctx.tree
        owner = call.func.value  # type: ignore[attr-defined]
        reason = refusal(scaled_consumer(ctx, scope, call, owner), ctx.segment(owner), "MP501")
        if reason:
            refused[call] = reason
    return refused


def _hasattr_guard(ctx: StaticContext, call: ast.Call) -> ast.Call | None:
    """`hasattr(<the call's receiver>, "<its method>")`: the test of the nearest `if` / conditional expression
    whose true arm holds the call."""
    func = call.func
    assert isinstance(func, ast.Attribute)
    child: ast.AST = call
    node = ctx.parents.get(call)
    while node is not None and not isinstance(node, (*FUNCTION_NODES, ast.ClassDef, ast.Module)):
        arm = node.body if isinstance(node, (ast.If, ast.IfExp)) else None
        in_arm = child is arm or (isinstance(arm, list) and child in arm)
        if in_arm and _tests_hasattr(ctx, node.test, func):  # type: ignore[attr-defined]
            return node.test  # type: ignore[attr-defined]
        child, node = node, ctx.parents.get(node)
    return None


def _tests_hasattr(ctx: StaticContext, test: ast.AST, func: ast.Attribute) -> bool:
    return (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id == "hasattr"
        and len(test.args) == 2
        and not test.keywords
        and isinstance(test.args[1], ast.Constant)
        and test.args[1].value == func.attr
        and ctx.segment(test.args[0]) == ctx.segment(func.value)
    )


def _other_arm_scales(ctx: StaticContext, call: ast.Call, guard: ast.Call) -> bool:
    """The arm taken when the guard is False (on Keras 3) calls scale_loss: `get_scaled_loss(l) if hasattr(...)
    else scale_loss(l)` is a shim that works on both."""
    test_owner = ctx.parents.get(guard)
    other = getattr(test_owner, "orelse", None)
    nodes = other if isinstance(other, list) else [other] if other is not None else []
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "scale_loss"
        for stmt in nodes
        for n in ast.walk(stmt)
    )
