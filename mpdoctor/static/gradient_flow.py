"""What happens to gradients between `tape.gradient(...)` and `optimizer.apply_gradients(...)`, within one function.

A loss-scaling fix changes which gradients are scaled: after it, the values that flow from the tape to the
LossScaleOptimizer are 2**15 times larger until something divides them. That is right only if nothing but that
optimizer's `apply_gradients` / `apply` (which unscales, Keras 3) or `get_unscaled_gradients` (tf_keras) sees them
scaled. Real loops clip them (`tf.clip_by_global_norm`), all-reduce them (Horovod), accumulate them over steps,
average them by hand, or apply them through the inner optimizer (`.inner_optimizer`, `._optimizer`), which does not
unscale: a fix that scales there trains 32768 times too fast, or clips scaled values and then divides them (training
silently stops). The fixes ask this module and refuse with its reason.

The gradients are followed by value: through names (every later read of a name they were assigned to), `zip`,
`list`, tuples, conditional expressions and comprehensions whose element is the gradient itself. Anything else that
takes them is a consumer. Reading them without changing them (`g is None`, `len(grads)`) is not.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from mpdoctor.static.context import StaticContext

_APPLY = ("apply_gradients", "apply")
_STRUCTURE = {"zip", "list", "tuple", "enumerate", "reversed"}  # keep the gradients as they are
_READ_ONLY = {"len", "isinstance", "print", "id", "type"}
_INNER = ("inner_optimizer", "_optimizer")  # LossScaleOptimizer's wrapped optimizer (Keras 3, tf_keras)
_ALL_REDUCE = ("allreduce", "all_reduce", "all_gather", "batch_reduce", "cross_replica", "grouped_allreduce")
# Tape wrappers whose gradient() all-reduces (a linear average, so it commutes with the loss scale): Horovod's, and
# the documented way to use it with a LossScaleOptimizer is to differentiate the scaled loss through it.
_LINEAR_TAPE_WRAPPERS = ("DistributedGradientTape",)


@dataclass(frozen=True)
class Consumer:
    """Something other than the LossScaleOptimizer's apply that takes the (scaled) gradients."""

    kind: str  # clipped | all-reduced | accumulated | averaged | transformed | inner | other-optimizer | leaves | lost
    detail: str
    line: int

    def describe(self, optimizer: str) -> str:
        what = {
            "clipped": f"gradients are clipped ({self.detail}) before apply_gradients",
            "all-reduced": f"gradients are all-reduced ({self.detail}) before apply_gradients",
            "accumulated": f"gradients are accumulated ({self.detail}) before apply_gradients",
            "averaged": f"gradients are divided ({self.detail}, manual averaging) before apply_gradients",
            "transformed": f"gradients are passed to {self.detail} before apply_gradients",
            "inner": f"gradients are applied through the inner optimizer ({self.detail}), which does not unscale",
            "other-optimizer": f"gradients are applied by {self.detail}, not by the LossScaleOptimizer {optimizer}",
            "leaves": f"gradients are {self.detail} before apply_gradients",
            "lost": f"gradients do not reach {optimizer}.apply_gradients in this function",
            "wrapped-tape": f"gradients come from a wrapped tape ({self.detail}) that may transform them",
        }
        return what[self.kind]


def refusal(consumer: Consumer | None, optimizer: str, code: str) -> str | None:
    """The sentence a fix that cannot be made safely ends its finding's message with."""
    if consumer is None:
        return None
    return f"not fixed automatically: {consumer.describe(optimizer)}; unscale them first (see explain {code})"


def scaled_consumer(
    ctx: StaticContext,
    scope: ast.AST,
    start: ast.AST,
    optimizer: ast.AST,
    *,
    until_unscaled: bool = False,
    through: ast.stmt | None = None,
) -> Consumer | None:
    """The first consumer of the value of `start` (a `tape.gradient(...)` or `get_unscaled_gradients(...)` call)
    other than `optimizer`'s apply, when that value is scaled; None when every path takes it straight to
    `optimizer.apply_gradients/apply` (or, `until_unscaled`, to a `get_unscaled_gradients` call). `through`: an
    assignment that counts as passing the gradients on unchanged (a clip a fix moves into the optimizer)."""
    flow = _Flow(ctx, scope, optimizer, scaled=True, until_unscaled=until_unscaled)
    flow.through = through
    return flow.first(start)


def applying_consumer(ctx: StaticContext, scope: ast.AST, start: ast.AST, optimizer: ast.AST) -> Consumer | None:
    """For gradients unscaled where they are taken (tf_keras `get_unscaled_gradients(tape.gradient(...))`): clipping
    and the like are then harmless, but they must still be applied by the LossScaleOptimizer (which adjusts the
    loss scale and skips steps with inf/NaN gradients), not by its inner optimizer."""
    return _Flow(ctx, scope, optimizer, scaled=False, until_unscaled=False).first(start)


def tape_wrapper(ctx: StaticContext, scope: ast.AST, tape: str) -> Consumer | None:
    """`tape = SomeWrapper(tape)` in `scope`: a wrapper whose gradient() may change the gradients (Horovod's
    DistributedGradientTape, a linear all-reduce, is fine)."""
    for node in ctx.walk_scope(scope):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == tape for t in node.targets)
            and isinstance(node.value, ast.Call)
            and any(isinstance(a, ast.Name) and a.id == tape for a in node.value.args)
        ):
            func = node.value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name not in _LINEAR_TAPE_WRAPPERS:
                return Consumer("wrapped-tape", f"{ctx.segment(func)}({tape})", node.lineno)
    return None


class _Flow:
    def __init__(self, ctx: StaticContext, scope: ast.AST, optimizer: ast.AST, *, scaled: bool, until_unscaled: bool):
        self.ctx = ctx
        self.scope = scope
        self.optimizer = _receiver_text(ctx, optimizer)
        self.scaled = scaled  # transformations matter (else only who applies them)
        self.until_unscaled = until_unscaled
        self.nodes = ctx.walk_scope(scope)
        self.reached = False
        self.through: ast.stmt | None = None

    def first(self, start: ast.AST) -> Consumer | None:
        seen: set[int] = set()
        work = [start]
        while work:
            node = work.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            consumer = self.step(node, work)
            if consumer is not None:
                return consumer
        if not self.reached:
            return Consumer("lost", "", getattr(start, "lineno", 0))
        return None

    def step(self, node: ast.AST, work: list[ast.AST]) -> Consumer | None:
        """Where the value of `node` goes next: more carriers on `work`, or the consumer that stops the fix."""
        parent = self.ctx.parents.get(node)
        line = getattr(node, "lineno", 0)
        if parent is not None and parent is not self.through and self._inside_through(parent):
            work.append(parent)  # inside the pass-through statement: its value is still the gradients
            return None
        if isinstance(parent, ast.keyword):
            node, parent = parent, self.ctx.parents.get(parent)
        if isinstance(parent, ast.Call) and parent.func is not node:
            return self.call(parent, work)
        if isinstance(parent, (ast.Tuple, ast.List, ast.Starred, ast.ListComp, ast.GeneratorExp)):
            work.append(parent)  # as an element (`(g, v)`, `[g for ...]`'s elt): still the gradients
        elif isinstance(parent, ast.IfExp) and node is not parent.test:
            work.append(parent)
        elif isinstance(parent, ast.comprehension) and node is parent.iter:
            work += self.comprehension_element_reads(parent)
        elif isinstance(parent, (ast.Assign, ast.AnnAssign)) and node is parent.value:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            for target in targets:
                consumer = self.assigned(target, parent, work)
                if consumer is not None:
                    return consumer
        elif isinstance(parent, ast.AugAssign):
            return self.transform("accumulated", f"{self.ctx.segment(parent.target)} {_op(parent.op)}=", line, node)
        elif isinstance(parent, ast.BinOp):
            kind = {ast.Div: "averaged", ast.Add: "accumulated"}.get(type(parent.op), "transformed")
            detail = f"`{self.ctx.segment(parent)}`" if kind != "averaged" else "/"
            return self.transform(kind, detail, line, parent, work)
        elif isinstance(parent, (ast.Return, ast.Yield, ast.YieldFrom)):
            return Consumer("leaves", "returned from the function", line) if self.scaled else None
        elif isinstance(parent, (ast.For, ast.AsyncFor)) and node is parent.iter:
            return self.transform("transformed", "a for loop", line, None)
        elif isinstance(parent, ast.Subscript) and node is parent.value:
            return self.transform("transformed", f"`{self.ctx.segment(parent)}`", line, parent, work)
        elif isinstance(parent, ast.Attribute):
            return self.transform("transformed", f"`.{parent.attr}`", line, None)
        # Compare, BoolOp, If/While tests, a bare expression statement: read, not changed
        return None

    def _inside_through(self, node: ast.AST) -> bool:
        while node is not None and self.through is not None:
            if node is self.through:
                return True
            node = self.ctx.parents.get(node)
        return False

    def transform(
        self, kind: str, detail: str, line: int, result: ast.AST | None, work: list | None = None
    ) -> Consumer | None:
        """A change of the gradients: a consumer when they are scaled; otherwise follow the result (if any)."""
        if self.scaled:
            return Consumer(kind, detail, line)
        if result is not None and work is not None:
            work.append(result)
        return None

    def call(self, call: ast.Call, work: list[ast.AST]) -> Consumer | None:
        name = self.ctx.call_name(call) or self.ctx.segment(call.func)
        last = name.rsplit(".", 1)[-1]
        lowered = name.lower()
        if last in _STRUCTURE and isinstance(call.func, ast.Name):
            work.append(call)
            return None
        if last in _READ_ONLY and isinstance(call.func, ast.Name):
            return None
        if last in _APPLY and isinstance(call.func, ast.Attribute):
            receiver = _receiver_text(self.ctx, call.func.value)
            if _is_inner(receiver):
                return Consumer("inner", self.ctx.segment(call.func.value), call.lineno)
            if receiver == self.optimizer:
                self.reached = True
                return None
            return Consumer("other-optimizer", self.ctx.segment(call.func.value), call.lineno)
        if last == "get_unscaled_gradients" and self.until_unscaled:
            self.reached = True
            return None
        if "clip" in last:
            kind = "clipped"
        elif any(word in lowered for word in _ALL_REDUCE):
            kind = "all-reduced"
        elif "accumul" in lowered:
            kind = "accumulated"
        else:
            kind = "transformed"
        return self.transform(kind, f"{name}()" if kind == "transformed" else name, call.lineno, call, work)

    def assigned(self, target: ast.AST, stmt: ast.stmt, work: list[ast.AST]) -> Consumer | None:
        if isinstance(target, ast.Name):
            work += self.later_reads(target.id, stmt)
            return None
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                consumer = self.assigned(element.value if isinstance(element, ast.Starred) else element, stmt, work)
                if consumer is not None:
                    return consumer
            return None
        return Consumer("leaves", f"stored in `{self.ctx.segment(target)}`", stmt.lineno)

    def later_reads(self, name: str, stmt: ast.stmt) -> list[ast.AST]:
        """Reads of `name` after `stmt` in the scope (all of them: a later reassignment from something else only
        adds carriers, which can only make the answer more cautious)."""
        after = (stmt.end_lineno or stmt.lineno, stmt.end_col_offset or 0)
        reads: list[ast.AST] = []
        for node in self.nodes:
            if isinstance(node, ast.Name) and node.id == name and (node.lineno, node.col_offset) > after:
                if isinstance(node.ctx, ast.Load):
                    reads.append(node)
                elif isinstance(self.ctx.parents.get(node), ast.AugAssign):
                    reads.append(node)  # `grads += ...`: reported as an accumulation by step()
        return reads

    def comprehension_element_reads(self, generator: ast.comprehension) -> list[ast.AST]:
        """`[f(g) for g in grads]`: the reads of the loop variables in the element carry the gradients on."""
        comprehension = self.ctx.parents.get(generator)
        names = {n.id for n in ast.walk(generator.target) if isinstance(n, ast.Name)}
        elements = (
            [comprehension.key, comprehension.value]
            if isinstance(comprehension, ast.DictComp)
            else [getattr(comprehension, "elt", None)]
        )
        return [
            n
            for element in elements
            if element is not None
            for n in ast.walk(element)
            if isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)
        ]


def _receiver_text(ctx: StaticContext, expr: ast.AST, depth: int = 0) -> str:
    """The optimizer expression as text, through local names (`opt = self.optimizer.inner_optimizer`)."""
    if isinstance(expr, ast.Name) and depth < 4:
        value = ctx.last_assignment(expr.id, expr)
        if isinstance(value, (ast.Name, ast.Attribute)):
            return _receiver_text(ctx, value, depth + 1)
    return ctx.segment(expr)


def _is_inner(receiver: str) -> bool:
    """`opt.inner_optimizer`, `self.optimizer._optimizer` (not `self._optimizer`: a trainer's own attribute)."""
    owner, _, last = receiver.rpartition(".")
    return last in _INNER and owner not in ("", "self")


def _op(op: ast.operator) -> str:
    return {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}.get(type(op), "?")
