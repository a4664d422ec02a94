"""Custom training loops in a file's source: a `tape.gradient(...)` whose result reaches an optimizer's
`apply_gradients` / `apply`, the optimizer behind it, and the loss-scaling calls around it (which may sit on the
other arm of an `if use_float16:`). What MP501/MP502 judge and what their fixes rewrite."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from mpdoctor.static.astutil import contains
from mpdoctor.static.context import StaticContext
from mpdoctor.static.tree_index import FUNCTION_NODES

_APPLY_METHODS = ("apply_gradients", "apply")
_LSO_NAMES = ("LossScaleOptimizer", "LossScaleOptimizerV3")
GRAPH_SOURCES_ATTRS = ("trainable_variables", "trainable_weights", "variables", "weights")
LOSS_SCALED_FLOAT16 = ("mixed_float16", "float16")  # the policies whose gradients need loss scaling


@dataclass
class TrainingLoop:
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
class Optimizer:
    kind: str  # "lso" | "compiled" | "plain" | "unknown"
    constructor: ast.Call | None = None  # the plain optimizer's constructor call, when found


def _scopes(ctx: StaticContext) -> Iterator[ast.AST]:
    yield ctx.tree
    for node in ctx.nodes:
        if isinstance(node, FUNCTION_NODES):
            yield node


def method_calls(ctx: StaticContext, scope: ast.AST, *methods: str) -> list[ast.Call]:
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


def names_in(node: ast.AST, skip: tuple[ast.AST, ...] = ()) -> set[str]:
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


def assigned_names(targets: Iterable[ast.AST]) -> set[str]:
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def training_loops(ctx: StaticContext) -> list[TrainingLoop]:
    """The file's training loops, each with only the scaling calls that can run together with its gradient call;
    without the plain arm of a loop that scales only `if use_float16:` (see `_on_its_branch`)."""
    return [branch for loop in _gradient_loops(ctx) if (branch := _on_its_branch(ctx, loop)) is not None]


def needs_loss_scaling(policies: frozenset) -> bool:
    return any(p in LOSS_SCALED_FLOAT16 for p in policies)


def _gradient_loops(ctx: StaticContext) -> list[TrainingLoop]:
    loops = []
    for scope in _scopes(ctx):
        tapes = _tape_blocks(ctx, scope)
        if not tapes:
            continue
        gradients = [
            c
            for c in method_calls(ctx, scope, "gradient")
            if isinstance(c.func.value, ast.Name) and c.func.value.id in tapes
        ]  # type: ignore[attr-defined]
        if gradients:
            loops += _loops_of_scope(ctx, scope, tapes, gradients)
    return loops


def _loops_of_scope(
    ctx: StaticContext, scope: ast.AST, tapes: dict[str, list[ast.With]], gradients: list[ast.Call]
) -> list[TrainingLoop]:
    """For each gradient call of `scope`, the first apply its result (or a name derived from it) reaches."""
    applies = method_calls(ctx, scope, *_APPLY_METHODS)
    assigns = [
        n
        for n in ctx.walk_scope(scope)
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None
    ]
    scale_calls = method_calls(ctx, scope, "scale_loss", "get_scaled_loss")
    unscale_calls = method_calls(ctx, scope, "get_unscaled_gradients")
    fors = [n for n in ctx.walk_scope(scope) if isinstance(n, ast.For)]
    accumulations = method_calls(ctx, scope, *_ACCUMULATING)
    loops = []
    for gradient in gradients:
        others = tuple(g for g in gradients if g is not gradient)
        tainted = _derived_names(assigns, gradient, others, _Accumulation(fors, accumulations))
        for apply in applies:
            args = [*apply.args, *(k.value for k in apply.keywords)]
            if any(contains(a, gradient) or names_in(a, others) & tainted for a in args):
                tape = gradient.func.value.id  # type: ignore[attr-defined]
                blocks = [w for w in tapes[tape] if w.lineno <= gradient.lineno]
                block = blocks[-1] if blocks else None
                loops.append(TrainingLoop(scope, gradient, apply, tape, block, scale_calls, unscale_calls))
                break
    return loops


# Calls that put gradients into a variable or list kept across steps (gradient accumulation): the receiver then
# holds them (`acc.assign_add(g)`, `accumulated[i].assign_add(grads[i])`, `buffer.append(grads)`).
_ACCUMULATING = ("assign_add", "assign", "append", "extend")


@dataclass(frozen=True)
class _Accumulation:
    """The `for` statements and accumulating calls of a scope, through which gradients reach other names."""

    fors: list[ast.For]
    calls: list[ast.Call]

    def receivers(self, call: ast.Call) -> set[str]:
        """The names an accumulating call stores into: its receiver's name, and for a loop variable of
        `for acc, g in zip(accumulated, grads)` the sequence it walks (`accumulated`)."""
        base = _base_name(call.func.value)  # type: ignore[attr-defined]
        if base is None:
            return set()
        names = {base}
        for loop in self.fors:
            iterated = loop.iter
            if not (isinstance(loop.target, ast.Tuple) and isinstance(iterated, ast.Call)):
                continue
            if not (isinstance(iterated.func, ast.Name) and iterated.func.id == "zip"):
                continue
            for element, sequence in zip(loop.target.elts, iterated.args, strict=False):
                if isinstance(element, ast.Name) and element.id == base and _base_name(sequence):
                    names.add(_base_name(sequence))  # type: ignore[arg-type]
        return names


def _walked(iterated: ast.AST) -> list[ast.AST]:
    """The sequences a `for` walks element by element: the iterable, or the arguments of zip/enumerate/reversed/list
    (not `range(len(grads))`, whose elements are indices)."""
    if isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name):
        return list(iterated.args) if iterated.func.id in ("zip", "enumerate", "reversed", "list") else []
    return [iterated]


def _base_name(expr: ast.AST) -> str | None:
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _derived_names(
    assigns: Sequence[ast.AST], gradient: ast.Call, others: tuple[ast.AST, ...], accumulation: _Accumulation
) -> set[str]:
    """Names holding (transformations of) this gradient call's result, also through loop variables and the
    variables or lists gradients are accumulated into; the other gradient calls of the scope are not looked into
    (their results are theirs)."""
    tainted: set[str] = set()

    def carries(node: ast.AST) -> bool:
        return contains(node, gradient) or bool(names_in(node, others) & tainted)

    changed = True
    while changed:
        new: set[str] = set()
        for node in assigns:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
            if carries(node.value):  # type: ignore[attr-defined]
                new |= assigned_names(targets)
        for loop in accumulation.fors:  # `for g in grads`, `for acc, g in zip(accumulated, grads)`
            if any(carries(walked) for walked in _walked(loop.iter)):
                new |= assigned_names([loop.target])
        for call in accumulation.calls:
            if any(carries(a) for a in call.args):
                new |= accumulation.receivers(call)
        new -= tainted
        tainted |= new
        changed = bool(new)
    return tainted


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


def optimizer_of(ctx: StaticContext, expr: ast.AST, depth: int = 0) -> Optimizer:
    if depth > 6:
        return Optimizer("unknown")
    if isinstance(expr, ast.Call):
        name = ctx.call_name(expr) or ""
        last = name.rsplit(".", 1)[-1]
        if last in _LSO_NAMES:
            return Optimizer("lso")
        if name.startswith("keras.optimizers.") and (last[:1].isupper() or last == "get"):
            return Optimizer("plain", expr)
        return Optimizer("unknown")
    value = _binding(ctx, expr)
    if value is not None:
        return optimizer_of(ctx, value, depth + 1)
    if isinstance(expr, ast.Attribute) and expr.attr == "optimizer":
        # `self.optimizer` in a train_step, `model.optimizer`: set by compile(), which wraps it in a
        # LossScaleOptimizer under mixed_float16 unless `auto_scale_loss=False` (Keras 3).
        if any(
            k.arg == "auto_scale_loss" and isinstance(k.value, ast.Constant) and k.value.value is False
            for c in ctx.calls
            for k in c.keywords
        ):
            return Optimizer("unknown")
        return Optimizer("compiled")
    return Optimizer("unknown")


def scaled_by_hand(ctx: StaticContext, target: ast.AST | None, at: ast.AST, depth: int = 0) -> bool:
    """`loss * loss_scale`, `loss * 1024.` (a loop that does static loss scaling itself)."""
    if target is None or depth > 4:
        return False
    if isinstance(target, ast.Name):
        value = ctx.last_assignment(target.id, at)
        return value is not None and scaled_by_hand(ctx, value, at, depth + 1)
    if isinstance(target, ast.BinOp) and isinstance(target.op, ast.Mult):
        for side in (target.left, target.right):
            if isinstance(side, ast.Constant) and isinstance(side.value, (int, float)) and side.value >= 128:
                return True
            if "scale" in ctx.segment(side).lower():
                return True
    return False


def scale_call_of(ctx: StaticContext, target: ast.AST | None, loop: TrainingLoop) -> ast.Call | None:
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


def in_block(node: ast.AST, block: ast.With | None) -> bool:
    return block is not None and any(contains(stmt, node) for stmt in block.body)


def _on_its_branch(ctx: StaticContext, loop: TrainingLoop) -> TrainingLoop | None:
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
    scaled = {name for name, _ in scaled_names(ctx, loop)}
    scaled_gradients = [  # Keras 3: the other arm differentiates the scaled loss (no unscaling call to see)
        c
        for c in method_calls(ctx, loop.scope, "gradient")
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


def scaled_names(ctx: StaticContext, loop: TrainingLoop) -> list[tuple[str, ast.stmt]]:
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
