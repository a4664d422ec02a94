"""The rewrite of a PyTorch training step's loss scaling (issue 36), for MP501/MP502's findings on
`loss.backward()` (mpdoctor.static.backend_steps): differentiate `optimizer.scale_loss(loss)` instead of the loss,
and wrap a plain optimizer's constructor in LossScaleOptimizer, whose `apply()` divides the gradients by the scale
(Keras 3's own PyTorch trainer does both). Measured on Keras 3.15 with torch 2.13 (tests/fixes/MP50[12]/torch_*):
the fixed step moves every float16 weight its unscaled twin left in place.

Refused when the gradients meet anything between `backward()` and `apply()` (a clip, a norm, an all-reduce): it
would see them multiplied by the loss scale. JAX steps are not rewritten: their scaling belongs inside the function
they differentiate, with the optimizer variables threaded through a StatelessScope, which is the user's to place."""

from __future__ import annotations

import ast

from mpdoctor.diagnostics import Fix
from mpdoctor.static.backend_steps import BackendStep, StepFinding, StepProblem
from mpdoctor.static.context import StaticContext
from mpdoctor.static.loss_scaling_fix import lso_spelling

# Calls that may sit between backward() and apply() without touching the gradients' values.
_NEUTRAL_CALLS = {"list", "tuple", "zip", "torch.no_grad", "torch.inference_mode"}


def step_fix(ctx: StaticContext, finding: StepFinding) -> tuple[Fix | None, str]:
    """(the rewrite, or None and why there is none)."""
    step = finding.step
    if step.backend != "torch":
        return None, (
            "mpdoctor does not rewrite JAX training steps (the scaling belongs inside the differentiated function, "
            "with the optimizer variables threaded through)"
        )
    between = _calls_between(ctx, step)
    if between:
        return None, (
            f"the gradients pass through `{between}` between backward() and {step.optimizer_text}."
            f"{step.apply.func.attr}(), which would see them multiplied by the loss scale"  # type: ignore[attr-defined]
        )
    problem, opt = finding.problem, step.optimizer_text
    loss = step.at.func.value  # type: ignore[attr-defined]
    scale = ctx.edit(loss, f"{opt}.scale_loss({ctx.segment(loss)})")
    if problem is StepProblem.NEVER_SCALED:
        return Fix(f"differentiate {opt}.scale_loss({step.loss_text})", (scale,), "unsafe", changes_training=True), ""
    constructor, spelling = step.optimizer.constructor, lso_spelling(ctx)
    if step.optimizer.kind != "plain" or constructor is None or spelling is None:
        return None, f"{opt} is not constructed where this file shows how"
    # Keras 3, which every PyTorch step runs on, has LossScaleOptimizer on every release.
    wrap = ctx.edit(constructor, f"{spelling}({ctx.segment(constructor)})")
    if problem is StepProblem.PLAIN_OPTIMIZER:
        return Fix("wrap the optimizer in LossScaleOptimizer", (wrap,), "unsafe", changes_training=True), ""
    description = f"wrap the optimizer in LossScaleOptimizer and differentiate {opt}.scale_loss({step.loss_text})"
    return Fix(description, (wrap, scale), "unsafe", changes_training=True), ""


def _calls_between(ctx: StaticContext, step: BackendStep) -> str | None:
    """The first call after `backward()` and before the optimizer's apply that is not the apply itself or known
    not to touch the gradients' values (its source), None when there is none."""
    start = (step.at.end_lineno or step.at.lineno, step.at.end_col_offset or 0)
    end = (step.apply.lineno, step.apply.col_offset)
    inside_apply = {id(n) for n in ast.walk(step.apply)}
    for call in ctx.nodes:
        if not isinstance(call, ast.Call) or id(call) in inside_apply:
            continue
        if not start <= (call.lineno, call.col_offset) < end:
            continue
        if (ctx.call_name(call) or ast.unparse(call.func)) in _NEUTRAL_CALLS:
            continue
        return ctx.segment(call).splitlines()[0]
    return None
