"""MP501 no-loss-scaling and MP502 loss-scaling-misuse: custom training loops under mixed_float16."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from mpdoctor.diagnostics import Confidence, Diagnostic, Edit, Fix
from mpdoctor.facts.tf_releases import FIRST_CURRENT_MIXED_PRECISION
from mpdoctor.registry import define_rule, static_check
from mpdoctor.static.astutil import contains
from mpdoctor.static.context import FUNCTION_NODES, StaticContext
from mpdoctor.static.gradient_flow import applying_consumer, refusal, scaled_consumer, tape_wrapper

define_rule(
    "MP501",
    "no-loss-scaling",
    "error",
    "ST",
    True,
    summary="A custom training loop (GradientTape + apply_gradients) under mixed_float16 without loss scaling.",
    what="""
        A custom training loop: a function (or module-level loop) that records a `tf.GradientTape()`, takes
        `tape.gradient(loss, variables)` and feeds those gradients to `optimizer.apply_gradients(...)` /
        `optimizer.apply(...)`, while the `mixed_float16` (or pure `float16`) policy is in force, with no loss
        scaling:
        - tf_keras (Keras 2): the loss is not passed through `LossScaleOptimizer.get_scaled_loss` and the
          gradients not through `get_unscaled_gradients` (tf_keras `apply_gradients` never unscales by itself);
        - Keras 3: the optimizer is not a `LossScaleOptimizer`, or nothing calls `optimizer.scale_loss(loss)`
          (Keras 3 `apply` unscales by itself; `scale_loss` of a plain optimizer does nothing).
        Reported at the `tape.gradient(...)` call. Not raised for `model.fit` (compile wraps the optimizer in a
        LossScaleOptimizer and scales for you), `optimizer.minimize(loss, vars, tape=tape)`, `mixed_bfloat16` /
        `bfloat16` (bfloat16 has float32's exponent range: no loss scaling needed), or a loop that multiplies
        the loss by a scale itself. The static pass follows the gradients by name within one function and reads
        the policy set in the file; a loop split across functions, or a policy set elsewhere, is not seen
        (use `--assume-policy mixed_float16`).
        """,
    why="""
        Under float16 compute the backward pass runs in float16, whose smallest subnormal is 5.96e-8: small
        gradients flush to zero and the model silently stops learning (or learns worse). Loss scaling multiplies
        the loss by a large factor (2**15 at the start, adjusted dynamically) so gradients stay representable,
        then divides them again in float32 before the update.
        """,
    bad="""
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(10)])
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        optimizer = keras.optimizers.Adam()

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)   # float16 gradients underflow
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """,
    good="""
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(10)])
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())

        # tf_keras instead: optimizer.get_scaled_loss(loss), then optimizer.get_unscaled_gradients(grads)
        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
                scaled_loss = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))   # divides by the loss scale
        """,
    fix="""
        When the loss is a name assigned inside the `with GradientTape()` block, the optimizer is constructed in
        the file (or is the compiled `self.optimizer`) and, for tf_keras, the variables are a list or
        `trainable_variables`: wraps the optimizer constructor in `LossScaleOptimizer(...)`, adds
        `scaled_loss = optimizer.scale_loss(loss)` (Keras 3) / `optimizer.get_scaled_loss(loss)` (tf_keras) at
        the end of the tape block, differentiates `scaled_loss`, and for tf_keras wraps the gradients in
        `optimizer.get_unscaled_gradients(...)`. Marked unsafe: it changes the optimizer object other code may
        share. Otherwise no autofix. Never when the gradients meet something on their way to the
        LossScaleOptimizer's `apply_gradients` that must not see them scaled (clipping, accumulation, an
        all-reduce, manual averaging, another function, the inner optimizer `.inner_optimizer` / `._optimizer`, a
        tape wrapper other than Horovod's `DistributedGradientTape`): the finding then says "not fixed
        automatically" and why; unscale the gradients before that point yourself (tf_keras:
        `get_unscaled_gradients`; Keras 3: clip with the inner optimizer's `clipnorm` / `global_clipnorm` /
        `clipvalue`, which it applies after the LossScaleOptimizer has unscaled). One exception, Keras 3: a single
        statement of the step that clips the gradients as they come from the tape, exactly as an optimizer
        argument does (`grads, _ = tf.clip_by_global_norm(grads, 1.0)`, `[tf.clip_by_value(g, -c, c) for g in
        grads]`, `[tf.clip_by_norm(g, c) for g in grads]`, c a positive literal), when the fix wraps a plain
        optimizer constructed in the file without clipping or accumulation arguments: the fix deletes the
        statement and passes `global_clipnorm` / `clipvalue` / `clipnorm` to the wrapped optimizer. (Dividing by
        the scale before the LossScaleOptimizer's `apply_gradients` would unscale twice, and applying through the
        inner optimizer would skip its overflow check: mpdoctor writes neither.) With the trace pass the fix is
        written only when one training step of the fixed file moves the weights like the float32 step.
        """,
)

define_rule(
    "MP502",
    "loss-scaling-misuse",
    "error",
    "S",
    True,
    summary="Loss scaling half done: scaled loss without unscaled gradients, or Keras 3 LossScaleOptimizer "
    "without scale_loss.",
    what="""
        Loss scaling that is wired up wrong in a GradientTape training loop:
        - tf_keras: `get_scaled_loss` without `get_unscaled_gradients` in the same function (or the reverse);
          a scaled loss is computed but `tape.gradient` differentiates the unscaled one;
        - Keras 3: a `LossScaleOptimizer` (explicit, or the one `compile()` creates under `mixed_float16` for
          `self.optimizer` in a `train_step`) applies gradients of a loss that never went through
          `optimizer.scale_loss(...)`; or `scale_loss` is called but its result is not what is differentiated;
        - either: the loss is scaled after the `with GradientTape()` block, where the tape no longer records.
        The tf_keras methods `get_scaled_loss` / `get_unscaled_gradients` called under Keras 3 (where they do not
        exist) are MP103, not this rule.
        """,
    why="""
        Gradients end up off by the loss scale (2**15 = 32768 at the start): unscaled gradients divided again make
        updates ~32768 times too small (the model barely moves), scaled gradients never divided make them 32768
        times too large (or inf, and dynamic loss scaling then skips every step). A loss scaled outside the tape
        has no recorded path to the variables: `tape.gradient` returns None and `apply_gradients` raises
        "No gradients provided for any variable".
        """,
    bad="""
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(10)])
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))   # never multiplied by the loss scale
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))   # but divided by it here
        """,
    good="""
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(10)])
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())

        # tf_keras instead: optimizer.get_scaled_loss(loss), then optimizer.get_unscaled_gradients(grads)
        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
                scaled_loss = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))   # divides by the loss scale
        """,
    fix="""
        Mechanical cases only: differentiate the scaled loss instead of the unscaled one; add the missing
        `scale_loss` line at the end of the tape block (Keras 3); wrap `tape.gradient(...)` in
        `get_unscaled_gradients(...)` (tf_keras, when the variables are a list or `trainable_variables`).
        A loss scaled outside the tape, or unscaled gradients of a loss that was never scaled, get no autofix;
        nor do gradients that meet something other than the LossScaleOptimizer's apply while scaled (see MP501).
        """,
)


_APPLY_METHODS = ("apply_gradients", "apply")
_LSO_NAMES = ("LossScaleOptimizer", "LossScaleOptimizerV3")
_GRAPH_SOURCES_ATTRS = ("trainable_variables", "trainable_weights", "variables", "weights")
LOSS_SCALED_FLOAT16 = ("mixed_float16", "float16")  # the policies whose gradients need loss scaling


@dataclass
class _Loop:
    """One `tape.gradient(...)` whose result reaches `optimizer.apply_gradients/apply` in the same scope."""

    scope: ast.AST
    gradient: ast.Call
    apply: ast.Call
    tape: str
    with_node: ast.With | None  # the `with GradientTape() as tape:` block before the gradient call
    scale_calls: list[ast.Call] = field(default_factory=list)  # scale_loss / get_scaled_loss in the scope
    unscale_calls: list[ast.Call] = field(default_factory=list)  # get_unscaled_gradients in the scope

    @property
    def target(self) -> ast.AST | None:
        if self.gradient.args:
            return self.gradient.args[0]
        return next((k.value for k in self.gradient.keywords if k.arg == "target"), None)

    @property
    def sources(self) -> ast.AST | None:
        if len(self.gradient.args) > 1:
            return self.gradient.args[1]
        return next((k.value for k in self.gradient.keywords if k.arg == "sources"), None)

    @property
    def optimizer(self) -> ast.AST:
        return self.apply.func.value  # type: ignore[attr-defined]


@dataclass(frozen=True)
class _Optimizer:
    kind: str  # "lso" | "compiled" | "plain" | "unknown"
    constructor: ast.Call | None = None  # the plain optimizer's constructor call, when found


def _scopes(ctx: StaticContext) -> Iterator[ast.AST]:
    yield ctx.tree
    for node in ctx.nodes:
        if isinstance(node, FUNCTION_NODES):
            yield node


def _method_calls(ctx: StaticContext, scope: ast.AST, *methods: str) -> list[ast.Call]:
    return sorted(
        (
            n
            for n in ctx.walk_scope(scope)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in methods
        ),
        key=lambda n: (n.lineno, n.col_offset),
    )


def _is_tape_constructor(ctx: StaticContext, expr: ast.AST) -> bool:
    return isinstance(expr, ast.Call) and ctx.call_name(expr) in ("tf.GradientTape", "tf.autodiff.GradientTape")


def _tape_blocks(ctx: StaticContext, scope: ast.AST) -> dict[str, list[ast.With]]:
    """Tape variable name -> the `with` blocks recording it (`with tf.GradientTape() as tape:`, or `with tape:`
    after `tape = tf.GradientTape()`)."""
    found: dict[str, list[ast.With]] = {}
    assigned: set[str] = set()
    nodes = list(ctx.walk_scope(scope))
    for node in nodes:
        if isinstance(node, ast.Assign) and _is_tape_constructor(ctx, node.value):
            assigned |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    for node in nodes:
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if _is_tape_constructor(ctx, item.context_expr) and isinstance(item.optional_vars, ast.Name):
                    found.setdefault(item.optional_vars.id, []).append(node)
                elif isinstance(item.context_expr, ast.Name) and item.context_expr.id in assigned:
                    found.setdefault(item.context_expr.id, []).append(node)
    for name in assigned:
        found.setdefault(name, [])
    return found


def _names_in(node: ast.AST, skip: tuple[ast.AST, ...] = ()) -> set[str]:
    """Names read in `node`, not looking inside the arguments of the `skip` calls."""
    names: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.Name):
            names.add(current.id)
        if current in skip:
            continue
        stack.extend(ast.iter_child_nodes(current))
    return names


def _assigned_names(targets: Iterable[ast.AST]) -> set[str]:
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _loops(ctx: StaticContext) -> list[_Loop]:
    loops = []
    for scope in _scopes(ctx):
        tapes = _tape_blocks(ctx, scope)
        if not tapes:
            continue
        gradients = [
            c
            for c in _method_calls(ctx, scope, "gradient")
            if isinstance(c.func.value, ast.Name) and c.func.value.id in tapes
        ]  # type: ignore[attr-defined]
        if not gradients:
            continue
        applies = _method_calls(ctx, scope, *_APPLY_METHODS)
        assigns = [
            n
            for n in ctx.walk_scope(scope)
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None
        ]
        scale_calls = _method_calls(ctx, scope, "scale_loss", "get_scaled_loss")
        unscale_calls = _method_calls(ctx, scope, "get_unscaled_gradients")
        for gradient in gradients:
            others = tuple(g for g in gradients if g is not gradient)
            tainted: set[str] = set()
            changed = True
            while changed:  # names holding (transformations of) this gradient call's result
                changed = False
                for node in assigns:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    if contains(node.value, gradient) or _names_in(node.value, others) & tainted:
                        new = _assigned_names(targets) - tainted
                        if new:
                            tainted |= new
                            changed = True
            for apply in applies:
                args = [*apply.args, *(k.value for k in apply.keywords)]
                if any(contains(a, gradient) or _names_in(a, others) & tainted for a in args):
                    tape = gradient.func.value.id  # type: ignore[attr-defined]
                    blocks = [w for w in tapes[tape] if w.lineno <= gradient.lineno]
                    loops.append(
                        _Loop(scope, gradient, apply, tape, blocks[-1] if blocks else None, scale_calls, unscale_calls)
                    )
                    break
    return loops


def _module_assignments(ctx: StaticContext, name: str) -> list[ast.AST]:
    """Values assigned to `name` at module level, in source order, those under an `if`/`try`/`with` included
    (`if use_fp16: optimizer = LossScaleOptimizer(optimizer)`: the last one is what a mixed run uses)."""
    assigns = [
        stmt
        for stmt in ctx.walk_scope(ctx.tree)
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
    ]
    return [stmt.value for stmt in sorted(assigns, key=lambda s: (s.lineno, s.col_offset))]


def _binding(ctx: StaticContext, expr: ast.AST) -> ast.AST | None:
    """The value a name or `self.attr` was bound to (same scope first, then module level)."""
    if isinstance(expr, ast.Name):
        value = ctx.last_assignment(expr.id, expr)
        if value is None and ctx.enclosing_function(expr) is not None:
            candidates = _module_assignments(ctx, expr.id)
            value = candidates[-1] if candidates else None
        return value
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        return ctx.self_attribute(expr, expr.attr)
    return None


def _optimizer(ctx: StaticContext, expr: ast.AST, depth: int = 0) -> _Optimizer:
    if depth > 6:
        return _Optimizer("unknown")
    if isinstance(expr, ast.Call):
        name = ctx.call_name(expr) or ""
        last = name.rsplit(".", 1)[-1]
        if last in _LSO_NAMES:
            return _Optimizer("lso")
        if name.startswith("keras.optimizers.") and (last[:1].isupper() or last == "get"):
            return _Optimizer("plain", expr)
        return _Optimizer("unknown")
    value = _binding(ctx, expr)
    if value is not None:
        return _optimizer(ctx, value, depth + 1)
    if isinstance(expr, ast.Attribute) and expr.attr == "optimizer":
        # `self.optimizer` in a train_step, `model.optimizer`: set by compile(), which wraps it in a
        # LossScaleOptimizer under mixed_float16 unless `auto_scale_loss=False` (Keras 3).
        if any(
            k.arg == "auto_scale_loss" and isinstance(k.value, ast.Constant) and k.value.value is False
            for c in ctx.calls
            for k in c.keywords
        ):
            return _Optimizer("unknown")
        return _Optimizer("compiled")
    return _Optimizer("unknown")


def _scaled_by_hand(ctx: StaticContext, target: ast.AST | None, at: ast.AST, depth: int = 0) -> bool:
    """`loss * loss_scale`, `loss * 1024.` (a loop that does static loss scaling itself)."""
    if target is None or depth > 4:
        return False
    if isinstance(target, ast.Name):
        value = ctx.last_assignment(target.id, at)
        return value is not None and _scaled_by_hand(ctx, value, at, depth + 1)
    if isinstance(target, ast.BinOp) and isinstance(target.op, ast.Mult):
        for side in (target.left, target.right):
            if isinstance(side, ast.Constant) and isinstance(side.value, (int, float)) and side.value >= 128:
                return True
            if "scale" in ctx.segment(side).lower():
                return True
    return False


def _scale_call_of(ctx: StaticContext, target: ast.AST | None, loop: _Loop) -> ast.Call | None:
    """The scale_loss / get_scaled_loss call whose result `target` is (directly or through one name)."""
    if target is None:
        return None
    if isinstance(target, ast.Call) and target in loop.scale_calls:
        return target
    if isinstance(target, ast.Name):
        value = ctx.last_assignment(target.id, loop.gradient)
        if isinstance(value, ast.Call) and value in loop.scale_calls:
            return value
        # `scaled_loss = optimizer.scale_loss(loss) if amp else loss`: scaled on the path that needs it (adding
        # another scale_loss would scale that path twice)
        if isinstance(value, ast.IfExp):
            return next((arm for arm in (value.body, value.orelse) if arm in loop.scale_calls), None)
    return None


def _policy_confidence(policies: frozenset) -> tuple[bool, Confidence]:
    hits = {p for p in policies if p in LOSS_SCALED_FLOAT16}
    if not hits:
        return False, Confidence.HIGH
    return True, (Confidence.HIGH if hits == set(policies) else Confidence.MEDIUM)


def _in_block(node: ast.AST, block: ast.With | None) -> bool:
    return block is not None and any(contains(stmt, node) for stmt in block.body)


def _line_indent(ctx: StaticContext, stmt: ast.stmt) -> str | None:
    prefix = ctx.lines[stmt.lineno - 1][: stmt.col_offset]
    return prefix if prefix.strip() == "" else None


def _insert_line_edit(ctx: StaticContext, loop: _Loop, text: str) -> Edit | None:
    """Insert a statement at the end of the tape block (or before the statement holding the gradient call when it
    is inside the block)."""
    block = loop.with_node
    if block is None or not block.body or block.body[0].lineno == block.lineno:
        return None
    if _in_block(loop.gradient, block):
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


def _target_defined_in_block(ctx: StaticContext, loop: _Loop) -> bool:
    target = loop.target
    if not isinstance(target, ast.Name) or loop.with_node is None:
        return False
    for node in ast.walk(loop.with_node):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if target.id in _assigned_names(targets) and node.lineno < loop.gradient.lineno:
                return True
    return False


def _fix_runs_on_target(ctx: StaticContext, wrap: bool) -> bool:
    """The loss-scaling API a fix writes exists on every release of the file's target: one Keras (scale_loss is
    Keras 3, get_scaled_loss Keras 2), and for a new LossScaleOptimizer(opt) the non-experimental API (TF 2.4)."""
    return ctx.target.keras_certain and (not wrap or ctx.target.at_least(FIRST_CURRENT_MIXED_PRECISION))


def _lso_spelling(ctx: StaticContext) -> str | None:
    """How this file can spell keras.mixed_precision.LossScaleOptimizer with the names it already imports."""
    aliases = ctx.imports.aliases
    from mpdoctor.static.names import canonical

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


def _sources_are_a_list(ctx: StaticContext, sources: ast.AST | None, at: ast.AST, depth: int = 0) -> bool:
    if sources is None or depth > 3:
        return False
    if isinstance(sources, (ast.List, ast.Tuple, ast.ListComp)):
        return True
    if isinstance(sources, ast.Attribute) and sources.attr in _GRAPH_SOURCES_ATTRS:
        return True
    if isinstance(sources, ast.BinOp) and isinstance(sources.op, ast.Add):
        return _sources_are_a_list(ctx, sources.left, at, depth + 1) and _sources_are_a_list(
            ctx, sources.right, at, depth + 1
        )
    if isinstance(sources, ast.Name):
        value = ctx.last_assignment(sources.id, at)
        return value is not None and _sources_are_a_list(ctx, value, at, depth + 1)
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


def _add_scaling_fix(
    ctx: StaticContext, loop: _Loop, optimizer: _Optimizer, *, wrap: bool, clip: _ClipMove | None = None
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
        spelling = _lso_spelling(ctx)
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
        if not _sources_are_a_list(ctx, loop.sources, loop.gradient):
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


@static_check("MP501", "MP502", requires=r"GradientTape")
def check_loss_scaling(ctx: StaticContext) -> Iterable[Diagnostic]:
    found: list[Diagnostic] = []
    loops = _loops(ctx)
    keras3 = ctx.is_keras3
    loops = [branch for loop in loops if (branch := _on_its_branch(ctx, loop)) is not None]
    for loop in loops:
        methods = {c.func.attr for c in [*loop.scale_calls, *loop.unscale_calls]}  # type: ignore[attr-defined]
        if keras3 and methods & {"get_scaled_loss", "get_unscaled_gradients"}:
            continue  # the tf_keras API on Keras 3: MP103 (it raises AttributeError)
        if not keras3 and "scale_loss" in methods:
            continue  # a Keras 3 method on tf_keras: it raises, nothing to say about scaling
        target = loop.target
        if target is None:
            continue
        optimizer = _optimizer(ctx, loop.optimizer)
        needs_scaling, confidence = _policy_confidence(ctx.policies_at(loop.gradient))
        scale_call = _scale_call_of(ctx, target, loop)
        opt_text = ctx.segment(loop.optimizer)
        by_hand = _scaled_by_hand(ctx, target, loop.gradient)
        if scale_call is not None:
            if not _in_block(scale_call, loop.with_node) and not _in_block(loop.gradient, loop.with_node):
                found.append(
                    ctx.diagnostic(
                        "MP502",
                        scale_call,
                        f"the loss is scaled after the `with {loop.tape}` block, where the GradientTape no longer "
                        f"records: {loop.tape}.gradient() of it returns None; move this line into the tape block",
                    )
                )
                continue
            if keras3 and optimizer.kind == "plain" and needs_scaling:
                found.append(
                    _guarded(
                        ctx,
                        loop,
                        "scaled",
                        ctx.diagnostic(
                            "MP501",
                            loop.gradient,
                            f"{opt_text} is a plain optimizer under a float16 policy, so scale_loss() returns the loss "
                            f"unchanged and float16 gradients can underflow; wrap it in "
                            f"keras.mixed_precision.LossScaleOptimizer",
                            confidence=confidence,
                            fix=_wrap_only_fix(ctx, optimizer),
                        ),
                    )
                )
            if not keras3 and not loop.unscale_calls:
                found.append(_guarded(ctx, loop, "unscaled", _unscale_missing(ctx, loop, scale_call, opt_text)))
            continue
        if loop.scale_calls and isinstance(target, ast.Name):
            scaled_names = _scaled_names(ctx, loop)
            if any(_names_in(c) & {target.id} for c in loop.scale_calls) and scaled_names:
                name, assign = scaled_names[0]
                fix = None
                if _in_block(assign, loop.with_node) or _in_block(loop.gradient, loop.with_node):
                    fix = Fix(
                        f"differentiate {name} instead of {target.id}",
                        (ctx.edit(target, name),),
                        changes_training=True,
                    )
                what = "divided by the loss scale in apply" if keras3 else "unscaled by get_unscaled_gradients"
                found.append(
                    _guarded(
                        ctx,
                        loop,
                        "scaled" if keras3 else "until unscaled",
                        ctx.diagnostic(
                            "MP502",
                            target,
                            f"{loop.tape}.gradient() differentiates the unscaled `{target.id}` although `{name}` holds "
                            f"the scaled loss: the gradients are then {what} and updates are ~32768 times too small",
                            fix=fix,
                        ),
                    )
                )
                continue
        if by_hand:
            continue
        policies = ctx.policies_at(loop.gradient)
        if keras3 and (optimizer.kind == "lso" or (optimizer.kind == "compiled" and "mixed_float16" in policies)):
            origin = (
                "a LossScaleOptimizer"
                if optimizer.kind == "lso"
                else "the LossScaleOptimizer compile() creates under mixed_float16"
            )
            found.append(
                _guarded(
                    ctx,
                    loop,
                    "scaled",
                    ctx.diagnostic(
                        "MP502",
                        loop.gradient,
                        f"{opt_text} is {origin}, whose {loop.apply.func.attr}() "  # type: ignore[attr-defined]
                        "divides the gradients by the loss scale, "
                        f"but the loss was never passed through {opt_text}.scale_loss(): "
                        "updates are ~32768 times too small",
                        confidence=Confidence.HIGH if optimizer.kind == "lso" else Confidence.MEDIUM,
                        fix=_add_scaling_fix(ctx, loop, optimizer, wrap=False),
                    ),
                )
            )
            continue
        if not keras3 and loop.unscale_calls:
            continue  # reported below as unscaled gradients without a scaled loss
        if not needs_scaling:
            continue
        policy = "mixed_float16" if "mixed_float16" in policies else "float16"
        if keras3:
            advice = (
                "wrap the optimizer in keras.mixed_precision.LossScaleOptimizer and differentiate "
                f"{opt_text}.scale_loss(loss)"
            )
            wrap = optimizer.kind == "plain"
        else:
            advice = (
                "use a LossScaleOptimizer with get_scaled_loss() inside the tape and "
                "get_unscaled_gradients() on the gradients (tf_keras apply_gradients does not unscale)"
            )
            wrap = optimizer.kind == "plain"
        fixable = optimizer.kind in ("lso", "plain") or (optimizer.kind == "compiled" and policy == "mixed_float16")
        fix = _add_scaling_fix(ctx, loop, optimizer, wrap=wrap) if fixable else None
        found.append(
            _guarded(
                ctx,
                loop,
                "scaled" if keras3 else "unscaled",
                ctx.diagnostic(
                    "MP501",
                    loop.gradient,
                    f"custom training loop under {policy} without loss scaling: "
                    f"float16 gradients of `{ctx.segment(target)}` "
                    f"can underflow to zero{ctx.target.note()}; {advice}",
                    confidence=confidence,
                    fix=fix,
                ),
            )
        )
    if not keras3:
        found += _unpaired_tf_keras_calls(ctx, loops)
    return _dedupe(found)


def _guarded(ctx: StaticContext, loop: _Loop, mode: str, diagnostic: Diagnostic) -> Diagnostic:
    """The finding without its fix, and the reason in its message, when the gradients meet something between the
    tape and the LossScaleOptimizer's apply that must not see them scaled (mpdoctor.static.gradient_flow). `mode`:
    "scaled" (after the fix they stay scaled until apply unscales them: Keras 3), "until unscaled" (scaled until a
    get_unscaled_gradients call: tf_keras), "unscaled" (the fix unscales them where they are taken: only who
    applies them matters)."""
    if diagnostic.fix is None:
        return diagnostic
    consumer = tape_wrapper(ctx, loop.scope, loop.tape)
    if consumer is None and mode == "unscaled":
        consumer = applying_consumer(ctx, loop.scope, loop.gradient, loop.optimizer)
    elif consumer is None:
        consumer = scaled_consumer(
            ctx, loop.scope, loop.gradient, loop.optimizer, until_unscaled=mode == "until unscaled"
        )
    reason = refusal(consumer, ctx.segment(loop.optimizer), diagnostic.code)
    if reason is None:
        return diagnostic
    if consumer.kind == "clipped" and mode == "scaled":
        moved = _clip_moved_into_optimizer(ctx, loop, consumer, diagnostic)
        if moved is not None:
            return replace(diagnostic, fix=moved)
    return replace(diagnostic, fix=None, message=f"{diagnostic.message}; {reason}")


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


def _clip_moved_into_optimizer(ctx: StaticContext, loop: _Loop, consumer, diagnostic: Diagnostic) -> Fix | None:
    """Keras 3 (issue 19): gradients clipped before the LossScaleOptimizer's apply would be clipped while scaled.
    When the clip is one statement of the step's body that an optimizer argument does exactly (clip by global norm,
    by value with symmetric bounds, per-tensor by norm, with a positive literal), on the gradients as they come from
    the tape and going on to apply unchanged, and the fix wraps a plain optimizer constructed in the file without
    clipping or accumulation arguments of its own: the fix deletes the statement and gives the inner optimizer the
    argument. Anything else stays refused."""
    if not ctx.is_keras3 or diagnostic.code != "MP501" or diagnostic.fix is None:
        return None
    optimizer = _optimizer(ctx, loop.optimizer)
    constructor = optimizer.constructor
    if optimizer.kind != "plain" or constructor is None or not diagnostic.fix.description.startswith("wrap"):
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
    return _add_scaling_fix(ctx, loop, optimizer, wrap=True, clip=_ClipMove(*move[1:], removal))


def _clip_statement(ctx: StaticContext, loop: _Loop, line: int) -> tuple[ast.stmt, str, str, str] | None:
    """(statement, keyword, value, its text) for `grads, _ = tf.clip_by_global_norm(grads, C)`,
    `grads = tf.clip_by_global_norm(grads, C)[0]`, `grads = [tf.clip_by_value(g, -C, C) for g in grads]` and
    `grads = [tf.clip_by_norm(g, C) for g in grads]`, a statement of the step's own body (not under a condition)."""
    body = getattr(loop.scope, "body", [])
    stmt = next((n for n in body if isinstance(n, ast.Assign) and n.lineno <= line <= n.end_lineno), None)
    if stmt is None or len(stmt.targets) != 1:
        return None
    target, value = stmt.targets[0], stmt.value
    what = ctx.segment(value)
    if isinstance(target, ast.Tuple) and len(target.elts) == 2 and all(isinstance(e, ast.Name) for e in target.elts):
        grads, norm = target.elts
        if norm.id != "_" and _read_after(ctx, loop.scope, norm.id, stmt):
            return None
        clip = _global_norm_clip(ctx, value, grads.id)
        return (stmt, "global_clipnorm", clip, what) if clip else None
    if not isinstance(target, ast.Name):
        return None
    if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) and value.slice.value == 0:
        clip = _global_norm_clip(ctx, value.value, target.id)
        return (stmt, "global_clipnorm", clip, what) if clip else None
    if not (isinstance(value, ast.ListComp) and len(value.generators) == 1):
        return None
    generator = value.generators[0]
    element = value.elt
    if (
        generator.ifs
        or generator.is_async
        or not isinstance(generator.target, ast.Name)
        or not _is_name(generator.iter, target.id)
        or not isinstance(element, ast.Call)
        or element.keywords
        or not element.args
        or not _is_name(element.args[0], generator.target.id)
    ):
        return None
    if _tf_function(ctx, element, "clip_by_value") and len(element.args) == 3:
        low, high = (_literal(a) for a in element.args[1:])
        if low and high and high[0] > 0 and low[0] == -high[0]:
            return stmt, "clipvalue", high[1], what
    if _tf_function(ctx, element, "clip_by_norm") and len(element.args) == 2:
        norm_value = _literal(element.args[1])
        if norm_value and norm_value[0] > 0:
            return stmt, "clipnorm", norm_value[1], what
    return None


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


def _on_its_branch(ctx: StaticContext, loop: _Loop) -> _Loop | None:
    """The loop with only the scaling calls that can run together with its gradient call. None for the plain
    branch of a loop that scales only `if use_float16:` (every scaling call is in the other branch): that branch
    runs without a float16 policy's loss scaling on purpose, there is nothing to pair or to miss."""
    scale = [c for c in loop.scale_calls if not _exclusive(ctx, c, loop.gradient)]
    unscale = [c for c in loop.unscale_calls if not _exclusive(ctx, c, loop.gradient)]
    if (loop.scale_calls or loop.unscale_calls) and not (scale or unscale):
        return None
    # `if use_float16: ... get_unscaled_gradients(...) else: grads = tape.gradient(loss, ...)`: the other arm of an
    # `if` around the gradient call does the scaling, so this arm is the float32 path on purpose, even when the
    # loss is scaled under a differently spelled condition (`if FLAGS.fp16:` in the tape, `if use_fp16:` here).
    arms = {(node, arm) for node, arm, _ in _branch_arms(ctx, loop.gradient)}
    scaled = {name for name, _ in _scaled_names(ctx, loop)}
    scaled_gradients = [  # Keras 3: the other arm differentiates the scaled loss (no unscaling call to see)
        c
        for c in _method_calls(ctx, loop.scope, "gradient")
        if c.args and isinstance(c.args[0], ast.Name) and c.args[0].id in scaled
    ]
    for call in [*loop.scale_calls, *loop.unscale_calls, *scaled_gradients]:
        if any((node, not arm) in arms for node, arm, _ in _branch_arms(ctx, call)):
            return None
    return replace(loop, scale_calls=scale, unscale_calls=unscale)


def _exclusive(ctx: StaticContext, a: ast.AST, b: ast.AST) -> bool:
    """Whether `a` and `b` never run in the same pass: the two arms of one `if`, or opposite arms of two `if`s on
    the same condition (`if use_fp16:` scale inside the tape ... `if use_fp16: ... else:` differentiate)."""
    arms_a, arms_b = _branch_arms(ctx, a), _branch_arms(ctx, b)
    for node, arm, condition in arms_a:
        for other_node, other_arm, other_condition in arms_b:
            if (node is other_node or condition == other_condition) and arm != other_arm:
                return True
    return False


def _branch_arms(ctx: StaticContext, node: ast.AST) -> list[tuple[ast.If, bool, str]]:
    """(if statement, True for its body / False for its else, the condition as text with `not` folded into the
    arm) for every `if` that encloses `node` within its function."""
    arms = []
    child, parent = node, ctx.parents.get(node)
    while parent is not None and not isinstance(parent, FUNCTION_NODES):
        if isinstance(parent, ast.If) and child is not parent.test:
            arm = child in parent.body
            test = parent.test
            while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                test, arm = test.operand, not arm
            arms.append((parent, arm, ast.dump(test)))
        child, parent = parent, ctx.parents.get(parent)
    return arms


def _scaled_names(ctx: StaticContext, loop: _Loop) -> list[tuple[str, ast.stmt]]:
    names = []
    for call in loop.scale_calls:
        stmt = ctx.statement_of(call)
        if (
            isinstance(stmt, ast.Assign)
            and stmt.value is call
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
        ):
            names.append((stmt.targets[0].id, stmt))
    return names


def _wrap_only_fix(ctx: StaticContext, optimizer: _Optimizer) -> Fix | None:
    spelling = _lso_spelling(ctx)
    if optimizer.constructor is None or spelling is None or not _fix_runs_on_target(ctx, wrap=True):
        return None
    return Fix(
        "wrap the optimizer in LossScaleOptimizer",
        (ctx.edit(optimizer.constructor, f"{spelling}({ctx.segment(optimizer.constructor)})"),),
        applicability="unsafe",
        changes_training=True,
    )


def _unscale_missing(ctx: StaticContext, loop: _Loop, scale_call: ast.Call, opt_text: str) -> Diagnostic:
    fix = None
    owner = ctx.segment(scale_call.func.value)  # type: ignore[attr-defined]
    if owner and "\n" not in owner and _sources_are_a_list(ctx, loop.sources, loop.gradient):
        fix = Fix(
            f"unscale the gradients with {owner}.get_unscaled_gradients()",
            (ctx.edit(loop.gradient, f"{owner}.get_unscaled_gradients({ctx.segment(loop.gradient)})"),),
            changes_training=True,
        )
    return ctx.diagnostic(
        "MP502",
        scale_call,
        f"get_scaled_loss() without get_unscaled_gradients(): tf_keras {loop.apply.func.attr}() does not unscale, "  # type: ignore[attr-defined]
        f"so the gradients applied by {opt_text} are ~32768 times too large (inf, and every step is skipped)",
        fix=fix,
    )


def _unpaired_tf_keras_calls(ctx: StaticContext, loops: list[_Loop]) -> list[Diagnostic]:
    """tf_keras get_unscaled_gradients without get_scaled_loss in a training loop's function."""
    found = []
    for loop in loops:
        scaled = [c for c in loop.scale_calls if c.func.attr == "get_scaled_loss"]  # type: ignore[attr-defined]
        if loop.unscale_calls and not scaled and not _scaled_by_hand(ctx, loop.target, loop.gradient):
            for call in loop.unscale_calls:
                found.append(
                    ctx.diagnostic(
                        "MP502",
                        call,
                        "get_unscaled_gradients() without get_scaled_loss(): the gradients of an unscaled loss are "
                        "divided by the loss scale, so updates are ~32768 times too small; differentiate "
                        "optimizer.get_scaled_loss(loss) computed inside the tape",
                    )
                )
    return found


def _dedupe(found: list[Diagnostic]) -> list[Diagnostic]:
    seen = set()
    result = []
    for d in found:
        key = (d.code, d.location.line, d.location.column)
        if key not in seen:
            seen.add(key)
            result.append(d)
    return result
