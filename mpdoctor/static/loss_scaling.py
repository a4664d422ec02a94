"""What is wrong with one custom training loop's loss scaling, if anything, and the fix for it: MP501 words the
loops without loss scaling, MP502 the ones with half of it; MP504 (trace) offers MP501's rewrite when the run
shows the gradients underflowing."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from enum import Enum

from mpdoctor.diagnostics import Fix
from mpdoctor.static.context import StaticContext
from mpdoctor.static.loss_scaling_fix import GuardedFix, add_scaling_fix, guarded, unscale_fix, wrap_only_fix
from mpdoctor.static.training_loop import (
    Optimizer,
    TrainingLoop,
    in_block,
    names_in,
    needs_loss_scaling,
    optimizer_of,
    scale_call_of,
    scaled_by_hand,
    scaled_names,
    training_loops,
)


class Problem(Enum):
    SCALED_AFTER_TAPE = "the loss is scaled after the tape block"
    PLAIN_OPTIMIZER = "scale_loss of a plain optimizer (Keras 3): no scaling"
    NEVER_UNSCALED = "get_scaled_loss without get_unscaled_gradients (tf_keras)"
    DIFFERENTIATES_UNSCALED = "the unscaled loss is differentiated although a scaled one exists"
    NEVER_SCALED = "a LossScaleOptimizer (Keras 3) divides gradients of a loss it never scaled"
    NO_LOSS_SCALING = "no loss scaling under a float16 policy"


# The problems whose fix adds the loss scaling a loop lacks.
ADDS_LOSS_SCALING = (Problem.PLAIN_OPTIMIZER, Problem.NO_LOSS_SCALING)


@dataclass(frozen=True)
class LoopFinding:
    problem: Problem
    loop: TrainingLoop
    at: ast.AST  # where it is reported
    optimizer: Optimizer
    fix: GuardedFix
    scaled_name: str = ""  # DIFFERENTIATES_UNSCALED: the name holding the scaled loss


def loss_scaling_fix(ctx: StaticContext) -> Fix | None:
    """The first rewrite that adds loss scaling to a training loop of the file without it."""
    for loop in training_loops(ctx):
        found = judge_loop(ctx, loop)
        if found is not None and found.problem in ADDS_LOSS_SCALING and found.fix.fix is not None:
            return found.fix.fix
    return None


def judge_loop(ctx: StaticContext, loop: TrainingLoop) -> LoopFinding | None:
    """What is wrong with the loop's loss scaling (one thing at most), from `training_loops(ctx)`."""
    keras3 = ctx.is_keras3
    methods = {c.func.attr for c in [*loop.scale_calls, *loop.unscale_calls]}  # type: ignore[attr-defined]
    if keras3 and methods & {"get_scaled_loss", "get_unscaled_gradients"}:
        return None  # the tf_keras API on Keras 3: MP103 (it raises AttributeError)
    if not keras3 and "scale_loss" in methods:
        return None  # a Keras 3 method on tf_keras: it raises, nothing to say about scaling
    if loop.target is None:
        return None
    optimizer = optimizer_of(ctx, loop.optimizer)
    scale_call = scale_call_of(ctx, loop.target, loop)
    if scale_call is not None:
        return _judge_scaled(ctx, loop, optimizer, scale_call)
    misdifferentiated = _differentiates_unscaled(ctx, loop, optimizer)
    if misdifferentiated is not None:
        return misdifferentiated
    if scaled_by_hand(ctx, loop.target, loop.gradient):
        return None
    return _judge_unscaled(ctx, loop, optimizer)


def _judge_scaled(
    ctx: StaticContext, loop: TrainingLoop, optimizer: Optimizer, scale_call: ast.Call
) -> LoopFinding | None:
    """The loss goes through scale_loss / get_scaled_loss before it is differentiated."""
    if not in_block(scale_call, loop.with_node) and not in_block(loop.gradient, loop.with_node):
        return LoopFinding(Problem.SCALED_AFTER_TAPE, loop, scale_call, optimizer, GuardedFix(None))
    needs_scaling = needs_loss_scaling(ctx.policies_at(loop.gradient))
    if ctx.is_keras3 and optimizer.kind == "plain" and needs_scaling:
        fix = guarded(ctx, loop, "scaled", wrap_only_fix(ctx, optimizer), adds_scaling=True)
        return LoopFinding(Problem.PLAIN_OPTIMIZER, loop, loop.gradient, optimizer, fix)
    if not ctx.is_keras3 and not loop.unscale_calls:
        fix = guarded(ctx, loop, "unscaled", unscale_fix(ctx, loop, scale_call), adds_scaling=False)
        return LoopFinding(Problem.NEVER_UNSCALED, loop, scale_call, optimizer, fix)
    return None


def _differentiates_unscaled(ctx: StaticContext, loop: TrainingLoop, optimizer: Optimizer) -> LoopFinding | None:
    """`scaled_loss = optimizer.scale_loss(loss)` but `tape.gradient(loss, ...)`."""
    target = loop.target
    if not loop.scale_calls or not isinstance(target, ast.Name):
        return None
    names = scaled_names(ctx, loop)
    if not names or not any(names_in(c) & {target.id} for c in loop.scale_calls):
        return None
    name, assign = names[0]
    fix = None
    if in_block(assign, loop.with_node) or in_block(loop.gradient, loop.with_node):
        fix = Fix(f"differentiate {name} instead of {target.id}", (ctx.edit(target, name),), changes_training=True)
    mode = "scaled" if ctx.is_keras3 else "until unscaled"
    guarded_fix = guarded(ctx, loop, mode, fix, adds_scaling=False)
    return LoopFinding(Problem.DIFFERENTIATES_UNSCALED, loop, target, optimizer, guarded_fix, scaled_name=name)


def _judge_unscaled(ctx: StaticContext, loop: TrainingLoop, optimizer: Optimizer) -> LoopFinding | None:
    """Nothing scales the loss."""
    keras3 = ctx.is_keras3
    policies = ctx.policies_at(loop.gradient)
    if keras3 and (optimizer.kind == "lso" or (optimizer.kind == "compiled" and "mixed_float16" in policies)):
        scaling = guarded(ctx, loop, "scaled", add_scaling_fix(ctx, loop, optimizer, wrap=False), adds_scaling=False)
        return LoopFinding(Problem.NEVER_SCALED, loop, loop.gradient, optimizer, scaling)
    if not keras3 and loop.unscale_calls:
        return None  # unscaled gradients without a scaled loss: MP502 reports the calls themselves
    if not needs_loss_scaling(policies):
        return None
    policy = "mixed_float16" if "mixed_float16" in policies else "float16"
    fixable = optimizer.kind in ("lso", "plain") or (optimizer.kind == "compiled" and policy == "mixed_float16")
    fix = add_scaling_fix(ctx, loop, optimizer, wrap=optimizer.kind == "plain") if fixable else None
    mode = "scaled" if keras3 else "unscaled"
    return LoopFinding(
        Problem.NO_LOSS_SCALING, loop, loop.gradient, optimizer, guarded(ctx, loop, mode, fix, adds_scaling=True)
    )
