"""The rewrites that add loss scaling to a custom training loop (MP501/MP502's fixes), and the check that
withholds one when the gradients meet something that must not see them scaled (mpdoctor.static.gradient_flow).
Keras 3 has one exception, a clip that the wrapped optimizer's own clip argument replaces exactly."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from mpdoctor.diagnostics import Edit, Fix
from mpdoctor.facts.tf_releases import FIRST_CURRENT_MIXED_PRECISION
from mpdoctor.static.context import StaticContext
from mpdoctor.static.gradient_flow import Consumer, applying_consumer, scaled_consumer, tape_wrapper
from mpdoctor.static.names import canonical
from mpdoctor.static.training_loop import (
    GRAPH_SOURCES_ATTRS,
    Optimizer,
    TrainingLoop,
    assigned_names,
    in_block,
    optimizer_of,
)


def _line_indent(ctx: StaticContext, stmt: ast.stmt) -> str | None:
    prefix = ctx.lines[stmt.lineno - 1][: stmt.col_offset]
    return prefix if prefix.strip() == "" else None


def _insert_line_edit(ctx: StaticContext, loop: TrainingLoop, text: str) -> Edit | None:
    """Insert a statement at the end of the tape block (or before the statement holding the gradient call when it
    is inside the block)."""
    block = loop.with_node
    if block is None or not block.body or block.body[0].lineno == block.lineno:
        return None
    if in_block(loop.gradient, block):
        stmt = ctx.statement_of(loop.gradient)
        indent = _line_indent(ctx, stmt)
        if indent is None:
            return None
        return Edit(ctx.display_path, stmt.lineno, 1, stmt.lineno, 1, f"{indent}{text}\n")
    first, last = block.body[0], block.body[-1]
    indent = _line_indent(ctx, first)
    if indent is None:
        return None
    if last.end_lineno < len(ctx.lines):
        line = last.end_lineno + 1
        return Edit(ctx.display_path, line, 1, line, 1, f"{indent}{text}\n")
    col = len(ctx.lines[last.end_lineno - 1].encode()) + 1
    return Edit(ctx.display_path, last.end_lineno, col, last.end_lineno, col, f"\n{indent}{text}")


def _fresh_name(ctx: StaticContext, scope: ast.AST, base: str) -> str:
    used = {n.id for n in ast.walk(scope) if isinstance(n, ast.Name)}
    name, i = base, 1
    while name in used:
        name, i = f"{base}_{i}", i + 1
    return name


def _target_defined_in_block(ctx: StaticContext, loop: TrainingLoop) -> bool:
    target = loop.target
    if not isinstance(target, ast.Name) or loop.with_node is None:
        return False
    for node in ast.walk(loop.with_node):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if target.id in assigned_names(targets) and node.lineno < loop.gradient.lineno:
                return True
    return False


def _fix_runs_on_target(ctx: StaticContext, wrap: bool) -> bool:
    """The loss-scaling API a fix writes exists on every release of the file's target: one Keras (scale_loss is
    Keras 3, get_scaled_loss Keras 2), and for a new LossScaleOptimizer(opt) the non-experimental API (TF 2.4)."""
    return ctx.target.keras_certain and (not wrap or ctx.target.at_least(FIRST_CURRENT_MIXED_PRECISION))


def lso_spelling(ctx: StaticContext) -> str | None:
    """How this file can spell keras.mixed_precision.LossScaleOptimizer with the names it already imports."""
    aliases = ctx.imports.aliases
    for local, full in sorted(aliases.items()):
        if canonical(full) == "keras.mixed_precision.LossScaleOptimizer":
            return local
    for local, full in sorted(aliases.items()):
        if canonical(full) == "keras.mixed_precision":
            return f"{local}.LossScaleOptimizer"
    for local, full in sorted(aliases.items()):
        if canonical(full) == "keras":
            return f"{local}.mixed_precision.LossScaleOptimizer"
    for local, full in sorted(aliases.items()):
        if full == "tensorflow":
            return f"{local}.keras.mixed_precision.LossScaleOptimizer"
    return None


def sources_are_a_list(ctx: StaticContext, sources: ast.AST | None, at: ast.AST, depth: int = 0) -> bool:
    if sources is None or depth > 3:
        return False
    if isinstance(sources, (ast.List, ast.Tuple, ast.ListComp)):
        return True
    if isinstance(sources, ast.Attribute) and sources.attr in GRAPH_SOURCES_ATTRS:
        return True
    if isinstance(sources, ast.BinOp) and isinstance(sources.op, ast.Add):
        return sources_are_a_list(ctx, sources.left, at, depth + 1) and sources_are_a_list(
            ctx, sources.right, at, depth + 1
        )
    if isinstance(sources, ast.Name):
        value = ctx.last_assignment(sources.id, at)
        return value is not None and sources_are_a_list(ctx, value, at, depth + 1)
    return False


def _replace_inside(ctx: StaticContext, outer: ast.AST, inner: ast.AST, new: str) -> str:
    """The source of `outer` with `inner` (a node inside it) replaced by `new`."""
    data = ctx.text.encode()
    starts = [0]
    for line in ctx.text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line.encode()))

    def offset(line: int, col: int) -> int:
        return starts[line - 1] + col

    o_start, o_end = offset(outer.lineno, outer.col_offset), offset(outer.end_lineno, outer.end_col_offset)
    i_start, i_end = offset(inner.lineno, inner.col_offset), offset(inner.end_lineno, inner.end_col_offset)
    return (data[o_start:i_start] + new.encode() + data[i_end:o_end]).decode()


def add_scaling_fix(
    ctx: StaticContext, loop: TrainingLoop, optimizer: Optimizer, *, wrap: bool, clip: _ClipMove | None = None
) -> Fix | None:
    """Scale the loss inside the tape block, differentiate the scaled loss, unscale (tf_keras) and optionally wrap
    the optimizer constructor in LossScaleOptimizer; `clip`: move the step's clipping into the wrapped optimizer."""
    target = loop.target
    if not _target_defined_in_block(ctx, loop) or not _fix_runs_on_target(ctx, wrap):
        return None
    keras3 = ctx.is_keras3
    opt_text = ctx.segment(loop.optimizer)
    if not opt_text or "\n" in opt_text:
        return None
    edits: list[Edit] = []
    if wrap:
        spelling = lso_spelling(ctx)
        if optimizer.constructor is None or spelling is None:
            return None
        inner = ctx.segment(optimizer.constructor)
        if clip is not None:
            inner = _with_keyword(inner, clip.keyword, clip.value)
            edits.append(clip.removal)
        edits.append(ctx.edit(optimizer.constructor, f"{spelling}({inner})"))
    scaled = _fresh_name(ctx, loop.scope, "scaled_loss")
    method = "scale_loss" if keras3 else "get_scaled_loss"
    insert = _insert_line_edit(ctx, loop, f"{scaled} = {opt_text}.{method}({target.id})")  # type: ignore[union-attr]
    if insert is None:
        return None
    edits.append(insert)
    if keras3:
        edits.append(ctx.edit(target, scaled))
    else:
        if not sources_are_a_list(ctx, loop.sources, loop.gradient):
            return None
        gradient_text = _replace_inside(ctx, loop.gradient, target, scaled)
        edits.append(ctx.edit(loop.gradient, f"{opt_text}.get_unscaled_gradients({gradient_text})"))
    if keras3:
        description = f"scale the loss with {opt_text}.scale_loss() inside the tape and differentiate it"
    else:
        description = (
            f"scale the loss with {opt_text}.get_scaled_loss() inside the tape and unscale the "
            f"gradients with {opt_text}.get_unscaled_gradients()"
        )
    if wrap:
        description = "wrap the optimizer in LossScaleOptimizer, " + description
    if clip is not None:
        description += (
            f", and clip in the optimizer ({clip.keyword}={clip.value}: after it unscales the gradients) instead of "
            f"{clip.what} before apply_gradients"
        )
    return Fix(
        description,
        tuple(sorted(edits, key=lambda e: (e.line, e.column))),
        applicability="unsafe",
        changes_training=True,
    )


def wrap_only_fix(ctx: StaticContext, optimizer: Optimizer) -> Fix | None:
    spelling = lso_spelling(ctx)
    if optimizer.constructor is None or spelling is None or not _fix_runs_on_target(ctx, wrap=True):
        return None
    return Fix(
        "wrap the optimizer in LossScaleOptimizer",
        (ctx.edit(optimizer.constructor, f"{spelling}({ctx.segment(optimizer.constructor)})"),),
        applicability="unsafe",
        changes_training=True,
    )


@dataclass(frozen=True)
class GuardedFix:
    """A fix after the check of who takes the gradients: `fix` None and `refused_by` set when it is withheld."""

    fix: Fix | None
    refused_by: Consumer | None = None


def guarded(ctx: StaticContext, loop: TrainingLoop, mode: str, fix: Fix | None, *, adds_scaling: bool) -> GuardedFix:
    """The fix, unless the gradients meet something between the tape and the LossScaleOptimizer's apply that must
    not see them scaled. `mode`: "scaled" (after the fix they stay scaled until apply unscales them: Keras 3),
    "until unscaled" (scaled until a get_unscaled_gradients call: tf_keras), "unscaled" (the fix unscales them where
    they are taken: only who applies them matters). `adds_scaling`: the fix is the one that adds loss scaling to a
    loop without it, which may move a clip into the optimizer instead of being refused."""
    if fix is None:
        return GuardedFix(None)
    consumer = tape_wrapper(ctx, loop.scope, loop.tape)
    if consumer is None and mode == "unscaled":
        consumer = applying_consumer(ctx, loop.scope, loop.gradient, loop.optimizer)
    elif consumer is None:
        consumer = scaled_consumer(
            ctx, loop.scope, loop.gradient, loop.optimizer, until_unscaled=mode == "until unscaled"
        )
    if consumer is None:
        return GuardedFix(fix)
    if consumer.kind == "clipped" and mode == "scaled" and adds_scaling:
        moved = _clip_moved_into_optimizer(ctx, loop, consumer, fix)
        if moved is not None:
            return GuardedFix(moved)
    return GuardedFix(None, consumer)


def unscale_fix(ctx: StaticContext, loop: TrainingLoop, scale_call: ast.Call) -> Fix | None:
    """tf_keras: wrap the gradient call in `get_unscaled_gradients(...)` of the optimizer that scaled the loss."""
    owner = ctx.segment(scale_call.func.value)  # type: ignore[attr-defined]
    if not owner or "\n" in owner or not sources_are_a_list(ctx, loop.sources, loop.gradient):
        return None
    return Fix(
        f"unscale the gradients with {owner}.get_unscaled_gradients()",
        (ctx.edit(loop.gradient, f"{owner}.get_unscaled_gradients({ctx.segment(loop.gradient)})"),),
        changes_training=True,
    )


# ---------------------------------------------------------------------------- Keras 3: clipping into the optimizer

# The clip arguments of a Keras 3 optimizer: its apply() clips the gradients the LossScaleOptimizer has unscaled
# (keras/src/optimizers/base_optimizer.py `_clip_gradients`, Keras 3.15), with the same arithmetic as the tf calls.
_CLIP_KEYWORDS = ("clipnorm", "clipvalue", "global_clipnorm")


@dataclass(frozen=True)
class _ClipMove:
    """A clip statement of the step that the optimizer's own clipping replaces exactly."""

    keyword: str  # global_clipnorm | clipvalue | clipnorm
    value: str  # the positive literal, as the file writes it
    what: str  # `tf.clip_by_global_norm(grads, 1.0)`
    removal: Edit  # deletes the statement's lines


def _clip_moved_into_optimizer(ctx: StaticContext, loop: TrainingLoop, consumer: Consumer, fix: Fix) -> Fix | None:
    """Keras 3 (issue 19): gradients clipped before the LossScaleOptimizer's apply would be clipped while scaled.
    When the clip is one statement of the step's body that an optimizer argument does exactly (clip by global norm,
    by value with symmetric bounds, per-tensor by norm, with a positive literal), on the gradients as they come from
    the tape and going on to apply unchanged, and the fix wraps a plain optimizer constructed in the file without
    clipping or accumulation arguments of its own: the fix deletes the statement and gives the inner optimizer the
    argument. Anything else stays refused."""
    if not ctx.is_keras3:
        return None
    optimizer = optimizer_of(ctx, loop.optimizer)
    constructor = optimizer.constructor
    if optimizer.kind != "plain" or constructor is None or not fix.description.startswith("wrap"):
        return None
    if any(k.arg is None or k.arg in (*_CLIP_KEYWORDS, "gradient_accumulation_steps") for k in constructor.keywords):
        return None
    move = _clip_statement(ctx, loop, consumer.line)
    if move is None:
        return None
    stmt = move[0]
    if scaled_consumer(ctx, loop.scope, loop.gradient, loop.optimizer, through=stmt) is not None:
        return None  # something else sees them scaled too (or the clip is not the only way they go)
    indent = _line_indent(ctx, stmt)
    rest = ctx.lines[stmt.end_lineno - 1].encode()[stmt.end_col_offset :].decode(errors="replace")
    if indent is None or rest.strip():
        return None
    removal = Edit(ctx.display_path, stmt.lineno, 1, stmt.end_lineno + 1, 1, "")
    return add_scaling_fix(ctx, loop, optimizer, wrap=True, clip=_ClipMove(*move[1:], removal))


def _clip_statement(ctx: StaticContext, loop: TrainingLoop, line: int) -> tuple[ast.stmt, str, str, str] | None:
    """(statement, keyword, value, its text) for `grads, _ = tf.clip_by_global_norm(grads, C)`,
    `grads = tf.clip_by_global_norm(grads, C)[0]`, `grads = [tf.clip_by_value(g, -C, C) for g in grads]` and
    `grads = [tf.clip_by_norm(g, C) for g in grads]`, a statement of the step's own body (not under a condition)."""
    body = getattr(loop.scope, "body", [])
    stmt = next((n for n in body if isinstance(n, ast.Assign) and n.lineno <= line <= n.end_lineno), None)
    if stmt is None or len(stmt.targets) != 1:
        return None
    target, value = stmt.targets[0], stmt.value
    if isinstance(target, ast.Tuple):
        clip = _unpacked_global_norm_clip(ctx, loop, stmt, target)
    elif not isinstance(target, ast.Name):
        return None
    elif isinstance(value, ast.Subscript):
        clip = _indexed_global_norm_clip(ctx, value, target.id)
    else:
        clip = _per_tensor_clip(ctx, value, target.id)
    return (stmt, *clip, ctx.segment(value)) if clip else None


def _unpacked_global_norm_clip(
    ctx: StaticContext, loop: TrainingLoop, stmt: ast.Assign, target: ast.Tuple
) -> tuple[str, str] | None:
    """`grads, _ = tf.clip_by_global_norm(grads, C)` (the norm unused after it)."""
    if len(target.elts) != 2 or not all(isinstance(e, ast.Name) for e in target.elts):
        return None
    grads, norm = target.elts
    if norm.id != "_" and _read_after(ctx, loop.scope, norm.id, stmt):  # type: ignore[attr-defined]
        return None
    clip = _global_norm_clip(ctx, stmt.value, grads.id)  # type: ignore[attr-defined]
    return ("global_clipnorm", clip) if clip else None


def _indexed_global_norm_clip(ctx: StaticContext, value: ast.Subscript, grads: str) -> tuple[str, str] | None:
    """`grads = tf.clip_by_global_norm(grads, C)[0]`."""
    if not (isinstance(value.slice, ast.Constant) and value.slice.value == 0):
        return None
    clip = _global_norm_clip(ctx, value.value, grads)
    return ("global_clipnorm", clip) if clip else None


def _per_tensor_clip(ctx: StaticContext, value: ast.AST, grads: str) -> tuple[str, str] | None:
    """`[tf.clip_by_value(g, -C, C) for g in grads]` or `[tf.clip_by_norm(g, C) for g in grads]`."""
    if not (isinstance(value, ast.ListComp) and len(value.generators) == 1):
        return None
    element = value.elt
    if not (isinstance(element, ast.Call) and _applies_to_each(value.generators[0], element, grads)):
        return None
    if _tf_function(ctx, element, "clip_by_value") and len(element.args) == 3:
        low, high = (_literal(a) for a in element.args[1:])
        if low and high and high[0] > 0 and low[0] == -high[0]:
            return "clipvalue", high[1]
    if _tf_function(ctx, element, "clip_by_norm") and len(element.args) == 2:
        norm_value = _literal(element.args[1])
        if norm_value and norm_value[0] > 0:
            return "clipnorm", norm_value[1]
    return None


def _applies_to_each(generator: ast.comprehension, element: ast.Call, grads: str) -> bool:
    """`f(g, ...) for g in grads`: the call takes each gradient as its first argument, unfiltered."""
    return (
        not generator.ifs
        and not generator.is_async
        and isinstance(generator.target, ast.Name)
        and _is_name(generator.iter, grads)
        and not element.keywords
        and bool(element.args)
        and _is_name(element.args[0], generator.target.id)
    )


def _global_norm_clip(ctx: StaticContext, call: ast.AST, grads: str) -> str | None:
    if not (isinstance(call, ast.Call) and _tf_function(ctx, call, "clip_by_global_norm")):
        return None
    if call.keywords or len(call.args) != 2 or not _is_name(call.args[0], grads):
        return None
    value = _literal(call.args[1])
    return value[1] if value and value[0] > 0 else None


def _tf_function(ctx: StaticContext, call: ast.Call, name: str) -> bool:
    return ctx.call_name(call) in (f"tf.{name}", f"tensorflow.{name}")


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _literal(node: ast.AST) -> tuple[float, str] | None:
    """(value, text) of a number literal, `-` allowed."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        sign, node = -1, node.operand
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return sign * float(node.value), repr(node.value)
    return None


def _read_after(ctx: StaticContext, scope: ast.AST, name: str, stmt: ast.stmt) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and n.lineno > stmt.end_lineno
        for n in ctx.walk_scope(scope)
    )


def _with_keyword(constructor: str, keyword: str, value: str) -> str:
    """`keras.optimizers.SGD(0.1)` -> `keras.optimizers.SGD(0.1, global_clipnorm=1.0)`."""
    head = constructor[: constructor.rindex(")")].rstrip()
    if head.endswith("(") or head.endswith(","):
        return f"{head}{' ' if head.endswith(',') else ''}{keyword}={value})"
    return f"{head}, {keyword}={value})"
