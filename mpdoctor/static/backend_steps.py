"""Keras 3 training steps written for the JAX and PyTorch backends (issue 36), what MP501/MP502 judge there:

- JAX: `jax.grad` / `jax.value_and_grad` of a loss function defined in the file, whose gradients a Keras optimizer
  applies (`stateless_apply`, `apply`, `apply_gradients`);
- PyTorch: `<loss>.backward()` in a scope where a Keras optimizer applies the gradients.

Measured on Keras 3.15 (the fixtures tests/fixtures/MP50[12]/{jax,torch}_*.py record each run): a small float16
gradient flushes to zero without loss scaling; `scale_loss` of a plain optimizer does nothing; a LossScaleOptimizer
divides the gradients of a loss it never scaled; under `stateless_apply` the loss scale lives in the optimizer
variables the step returns, so a step that drops them, or scales the loss with the optimizer's own (never updated)
variable instead of a StatelessScope of the ones it is given, skips every step once the gradients overflow.
`torch.autocast(dtype=torch.float16)` makes the forward's matmuls float16 under any Keras policy (the gradients
flush as under mixed_float16); bfloat16 never needs loss scaling. Keras 3 has no `stateless_scale_loss`: Keras's own
JAX trainer scales with `scale_loss` under a StatelessScope, and so does the advice."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from enum import Enum

from mpdoctor.static.context import StaticContext
from mpdoctor.static.training_loop import Optimizer, needs_loss_scaling, optimizer_of, scaled_by_hand

_JAX_GRADIENTS = ("jax.grad", "jax.value_and_grad")
_APPLY_METHODS = ("stateless_apply", "apply", "apply_gradients")
_SCALE_METHODS = ("scale_loss", "stateless_scale_loss")
_FLOAT16_DTYPES = ("torch.float16", "torch.half")


class StepProblem(Enum):
    NO_LOSS_SCALING = "no loss scaling under float16"
    PLAIN_OPTIMIZER = "scale_loss of a plain optimizer"
    NEVER_SCALED = "a LossScaleOptimizer divides gradients of a loss it never scaled"
    VARIABLES_DROPPED = "stateless_apply's optimizer variables (the loss scale) are dropped"
    STALE_SCALE = "scale_loss reads the optimizer's own loss scale, which stateless_apply never updates"


@dataclass(frozen=True)
class BackendStep:
    """One JAX or PyTorch training step of the file."""

    backend: str  # "jax" | "torch"
    at: ast.Call  # the jax.grad / value_and_grad call, or the backward() call
    apply: ast.Call  # the optimizer's apply
    optimizer: Optimizer
    scale_call: ast.Call | None  # the scale_loss call that scales what is differentiated
    float16: bool  # the gradients are float16: the policy, or a float16 torch.autocast around the loss
    loss_text: str  # the differentiated function (JAX) or loss (PyTorch), as written

    @property
    def optimizer_text(self) -> str:
        return ast.unparse(self.apply.func.value)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class StepFinding:
    problem: StepProblem
    step: BackendStep
    at: ast.AST


def backend_steps(ctx: StaticContext) -> list[BackendStep]:
    if not ctx.is_keras3:
        return []  # only Keras 3 runs on JAX and PyTorch
    return [*_jax_steps(ctx), *_torch_steps(ctx)]


def judge_step(ctx: StaticContext, step: BackendStep) -> StepFinding | None:
    kind = step.optimizer.kind
    policies = ctx.policies_at(step.at)
    if step.scale_call is not None:
        if kind == "plain" and step.float16:
            return StepFinding(StepProblem.PLAIN_OPTIMIZER, step, step.at)
        if kind in ("lso", "compiled") and step.apply.func.attr == "stateless_apply":  # type: ignore[attr-defined]
            return _judge_stateless(ctx, step)
        return None
    if kind == "lso" or (kind == "compiled" and "mixed_float16" in policies):
        return StepFinding(StepProblem.NEVER_SCALED, step, step.at)
    if step.float16 and kind in ("plain", "unknown"):
        return StepFinding(StepProblem.NO_LOSS_SCALING, step, step.at)
    return None


def _judge_stateless(ctx: StaticContext, step: BackendStep) -> StepFinding | None:
    """A LossScaleOptimizer under stateless_apply: its loss scale is among the optimizer variables."""
    if _drops_optimizer_variables(ctx, step.apply):
        return StepFinding(StepProblem.VARIABLES_DROPPED, step, step.apply)
    scale = step.scale_call
    assert scale is not None
    in_scope = any(
        isinstance(node, ast.With) and any(_is_stateless_scope(ctx, item.context_expr) for item in node.items)
        for node in _ancestors(ctx, scale)
    )
    # Writing the returned variables back (`variable.assign(value)`) keeps the optimizer's own scale current
    # outside jit: silence then rather than guess whether the step is jitted. compile()'s optimizer in a train_step
    # override is another story: there the bare scale_loss raises inside fit's traced step (measured, Keras 3.15),
    # an error the user sees, not this silent one.
    if not in_scope and step.optimizer.kind == "lso" and not ctx.method_calls("assign"):
        return StepFinding(StepProblem.STALE_SCALE, step, scale)
    return None


# ---------------------------------------------------------------------------------------------------- JAX


def _jax_steps(ctx: StaticContext) -> list[BackendStep]:
    steps = []
    for call in ctx.calls_named(*_JAX_GRADIENTS):
        function = _differentiated_function(ctx, call)
        apply = _the_apply(ctx, ctx.tree) if function is not None else None
        if function is None or apply is None:
            continue
        policies = ctx.policies_at(call)
        steps.append(
            BackendStep(
                "jax",
                call,
                apply,
                optimizer_of(ctx, apply.func.value),  # type: ignore[attr-defined]
                _scale_in_function(ctx, function),
                needs_loss_scaling(policies),
                function.name,
            )
        )
    return steps


def _differentiated_function(ctx: StaticContext, call: ast.Call) -> ast.FunctionDef | None:
    """The function `jax.grad(f)` differentiates, when the file defines it once (`f`, or `self.f` of the class);
    None for a loss scaled by hand (`return loss * scale`): nothing to say about it."""
    if not call.args:
        return None
    target = call.args[0]
    if isinstance(target, ast.Name):
        candidates = [f for f in ctx.nodes_of(ast.FunctionDef) if f.name == target.id]
    elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
        owner = ctx.enclosing_class(call)
        candidates = [
            f for f in (owner.body if owner else []) if isinstance(f, ast.FunctionDef) and f.name == target.attr
        ]
    else:
        return None
    # The definition the call sees: the last one before it (a script that redefines its loss function between two
    # loops), else the only one.
    before = [
        f for f in candidates if f.lineno < call.lineno and ctx.enclosing_function(f) is ctx.enclosing_function(call)
    ]
    if before:
        function = max(before, key=lambda f: f.lineno)
    elif len(candidates) == 1:
        function = candidates[0]
    else:
        return None
    for node in ast.walk(function):
        if isinstance(node, ast.Return) and node.value is not None:
            value = node.value.elts[0] if isinstance(node.value, ast.Tuple) and node.value.elts else node.value
            if scaled_by_hand(ctx, value, node):
                return None
    return function


def _scale_in_function(ctx: StaticContext, function: ast.FunctionDef) -> ast.Call | None:
    return next((c for c in ctx.method_calls(*_SCALE_METHODS) if _inside(ctx, c, function)), None)


def _drops_optimizer_variables(ctx: StaticContext, apply: ast.Call) -> bool:
    """`new_vars, _ = optimizer.stateless_apply(...)`, or its result not kept at all."""
    statement = ctx.statement_of(apply)
    if isinstance(statement, ast.Expr) and statement.value is apply:
        return True
    if not isinstance(statement, ast.Assign) or statement.value is not apply or len(statement.targets) != 1:
        return False
    target = statement.targets[0]
    if not isinstance(target, (ast.Tuple, ast.List)) or len(target.elts) != 2:
        return False
    second = target.elts[1]
    if not isinstance(second, ast.Name):
        return False
    return second.id == "_" or not any(
        isinstance(n, ast.Name) and n.id == second.id and isinstance(n.ctx, ast.Load) for n in ctx.nodes
    )


def _is_stateless_scope(ctx: StaticContext, expr: ast.AST) -> bool:
    return isinstance(expr, ast.Call) and (ctx.call_name(expr) or "").rsplit(".", 1)[-1] == "StatelessScope"


# ------------------------------------------------------------------------------------------------ PyTorch


def _torch_steps(ctx: StaticContext) -> list[BackendStep]:
    steps = []
    for call in ctx.method_calls("backward"):
        loss = call.func.value  # type: ignore[attr-defined]
        scope = ctx.enclosing_function(call) or ctx.tree
        apply = _the_apply(ctx, scope)
        if apply is None or _scaled_otherwise(ctx, loss, call):
            continue
        autocast = _autocast_dtype(ctx, call, loss)
        # A bfloat16 autocast does not undo a float16 policy: Keras layers cast to their compute dtype themselves.
        float16 = autocast == "float16" or needs_loss_scaling(ctx.policies_at(call))
        steps.append(
            BackendStep(
                "torch",
                call,
                apply,
                optimizer_of(ctx, apply.func.value),  # type: ignore[attr-defined]
                _scale_of(ctx, loss, call),
                float16,
                ast.unparse(loss),
            )
        )
    return steps


def _scale_of(ctx: StaticContext, loss: ast.AST, at: ast.AST) -> ast.Call | None:
    """The scale_loss call `loss` is (directly or through one name)."""
    if isinstance(loss, ast.Name):
        value = ctx.last_assignment(loss.id, at)
        loss = value if value is not None else loss
    if isinstance(loss, ast.Call) and isinstance(loss.func, ast.Attribute) and loss.func.attr in _SCALE_METHODS:
        return loss
    return None


def _scaled_otherwise(ctx: StaticContext, loss: ast.AST, at: ast.AST) -> bool:
    """Scaled by hand, or by torch's own GradScaler (`scaler.scale(loss).backward()`)."""
    if scaled_by_hand(ctx, loss, at):
        return True
    if isinstance(loss, ast.Name):
        value = ctx.last_assignment(loss.id, at)
        loss = value if value is not None else loss
    return isinstance(loss, ast.Call) and isinstance(loss.func, ast.Attribute) and loss.func.attr == "scale"


def _autocast_dtype(ctx: StaticContext, at: ast.AST, loss: ast.AST) -> str | None:
    """ "float16" / "other" when the loss (or the backward call) is computed inside a torch autocast block whose dtype
    the code shows; None without one."""
    where = [at]
    if isinstance(loss, ast.Name) and (value := ctx.last_assignment(loss.id, at)) is not None:
        where.append(value)
    for node in where:
        for block in _ancestors(ctx, node):
            if not isinstance(block, ast.With):
                continue
            for item in block.items:
                dtype = _autocast_of(ctx, item.context_expr)
                if dtype is not None:
                    return dtype
    return None


def _autocast_of(ctx: StaticContext, expr: ast.AST) -> str | None:
    if not isinstance(expr, ast.Call):
        return None
    name = ctx.call_name(expr) or ""
    if name not in ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast"):
        return None
    dtype = next((k.value for k in expr.keywords if k.arg == "dtype"), None)
    if dtype is not None:
        return "float16" if ctx.resolve(dtype) in _FLOAT16_DTYPES else "other"
    device = expr.args[0] if expr.args else next((k.value for k in expr.keywords if k.arg == "device_type"), None)
    if name == "torch.cuda.amp.autocast" or (isinstance(device, ast.Constant) and device.value == "cuda"):
        return "float16"  # CUDA's autocast default
    return "other"  # the CPU default is bfloat16; an unknown device: no claim


# ---------------------------------------------------------------------------------------------- shared


def _the_apply(ctx: StaticContext, scope: ast.AST) -> ast.Call | None:
    """The one Keras optimizer's apply in `scope` (the file for JAX): a `stateless_apply`, or an apply of an
    optimizer the file shows is Keras's; None when there is none or several optimizers (no guessing which)."""
    found: dict[str, ast.Call] = {}
    for call in ctx.method_calls(*_APPLY_METHODS):
        if scope is not ctx.tree and not _inside(ctx, call, scope):
            continue
        receiver = call.func.value  # type: ignore[attr-defined]
        stateless = call.func.attr == "stateless_apply"  # type: ignore[attr-defined]
        if stateless or optimizer_of(ctx, receiver).kind in ("lso", "plain", "compiled"):
            found.setdefault(ast.unparse(receiver), call)
    return next(iter(found.values())) if len(found) == 1 else None


def _ancestors(ctx: StaticContext, node: ast.AST) -> list[ast.AST]:
    found = []
    parent = ctx.parents.get(node)
    while parent is not None:
        found.append(parent)
        parent = ctx.parents.get(parent)
    return found


def _inside(ctx: StaticContext, node: ast.AST, scope: ast.AST) -> bool:
    return scope in _ancestors(ctx, node)
