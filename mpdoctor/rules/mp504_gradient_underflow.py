"""MP504 gradient-underflow: one training step's gradients flush to zero under float16 (trace)."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Diagnostic, Fix
from mpdoctor.facts.dtypes import GRADIENT_FLUSH_THRESHOLD
from mpdoctor.registry import define_rule, trace_check
from mpdoctor.static.loss_scaling import loss_scaling_fix
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts, GradientRecord

THRESHOLD = GRADIENT_FLUSH_THRESHOLD  # measured on TF 2.21: see mpdoctor/facts/dtypes.py

define_rule(
    "MP504",
    "gradient-underflow",
    "warning",
    "T",
    True,
    summary="One training step's gradients, nonzero in float32, flush to zero under float16.",
    what="""
        For a model the file trains (its own `GradientTape` training step, a module-level function or a method of
        a module-level class called as `step(inputs, labels)`; else the model is compiled, or the file holds a
        Keras loss object and an optimizer at module level), the trace runs one training step on the sample batch with
        the same weights in float32 and under the model's policy, with the loss scaling the script really uses
        (none; the LossScaleOptimizer that `compile()` creates under mixed_float16; or the script's own
        LossScaleOptimizer, at its current scale). The step is the one training runs: the forward pass in
        training mode (BatchNorm on the batch's statistics), labels drawn with a fixed seed from the model's own
        float32 predictions (class ids, one-hot or 0/1 rows for a classification loss, the predictions plus noise
        of their own spread for regression), the loss times the scale, the gradients divided by it in float32;
        random layers (dropout, noise) whose draws differ between float16 and float32 run in inference mode in
        both steps. A dynamic loss scale whose scaled gradients overflow is halved and the step repeated, as the
        LossScaleOptimizer skips that step in training: the gradients are judged once the scale has settled.
        The script's own step is called itself (eagerly, on a sample batch with labels drawn the same way) and
        its gradients are what its `tape.gradient` returns: its own loss (a down-weighted term, a hand-written
        MSE), its own scaling. Nothing is kept: the weights and the model's and optimizer's state are restored.
        MP504 is raised when more than 10 % of the gradient values that are nonzero in float32 are zero (or
        inf/NaN) under the policy, naming the variables that lose the most. Reported at the optimizer's assignment
        (custom loop) or the `compile()` call. When the step cannot be run faithfully (the float32 step itself
        changes with the seed, the script's step raises), nothing is reported.
        """,
    why="""
        The backward pass of a float16 layer computes in float16, whose smallest subnormal is 5.96e-8: a gradient
        smaller than that becomes exactly 0 and the variable does not move. Measured on TF 2.21 (Keras 3 and
        tf_keras): outputs of about 1e-5 regressed with MSE averaged over 4096 outputs have per-output gradients of
        about 5e-9; under mixed_float16 without loss scaling every gradient of the output layer is 0 and one SGD
        step leaves its weights unchanged, while with a LossScaleOptimizer (loss x 2**15) they move. Training then
        stalls silently: the loss stays finite and nothing raises.
        """,
    bad="""
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.Input((64,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(4096, kernel_initializer=keras.initializers.RandomNormal(stddev=1e-6)),
            keras.layers.Activation("linear", dtype="float32"),
        ])
        loss_fn = keras.losses.MeanSquaredError()
        optimizer = keras.optimizers.SGD(0.1)   # no loss scaling: gradients of ~5e-9 are 0 in float16

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """,
    good="""
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.Input((64,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(4096, kernel_initializer=keras.initializers.RandomNormal(stddev=1e-6)),
            keras.layers.Activation("linear", dtype="float32"),
        ])
        loss_fn = keras.losses.MeanSquaredError()
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
                scaled_loss = optimizer.scale_loss(loss)   # x 2**15: the gradients stay representable
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))   # divides by the loss scale
        """,
    fix="""
        Loss scaling. When the file's training loop is one MP501 can rewrite (the loss assigned inside the
        `GradientTape` block, the optimizer constructed in the file), MP504 carries the same unsafe fix: wrap the
        optimizer in `LossScaleOptimizer`, scale the loss inside the tape and (tf_keras) unscale the gradients.
        Otherwise no autofix: use `model.fit` (which scales for you), a LossScaleOptimizer, or keep the layers
        whose gradients flush in float32 (`mpdoctor plan` names them).
        """,
)


@trace_check("MP504")
def trace_gradient_underflow(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    found = []
    for model in facts.models:
        record = model.gradients
        if record is None or record.skipped or not record.nonzero_reference:
            continue
        share = record.flushed_share
        if share <= THRESHOLD:
            continue
        worst = [v for v in record.variables if v.flushed][:3]
        names = ", ".join(f"`{v.name}` ({v.flushed / max(v.nonzero_reference, 1):.0%})" for v in worst)
        scaling = (
            "without loss scaling"
            if record.loss_scaling == "none"
            else f"with {record.loss_scaling} ({record.optimizer}) at scale {record.loss_scale:g}"
            + (f" (settled after {record.skipped_steps} skipped steps)" if record.skipped_steps else "")
        )
        advice = (
            "use loss scaling (keras.mixed_precision.LossScaleOptimizer, or model.fit which scales for you)"
            if record.loss_scaling == "none"
            else "raise the loss scale or keep the layers holding these variables in float32 (`mpdoctor plan`)"
        )
        line = _anchor(ctx, record, model.name)
        found.append(
            ctx.diagnostic(
                "MP504",
                ctx.at_line(line) if line else model.location,
                f"one training step (training mode) of model `{model.name}` under {record.policy} {scaling}: "
                f"{share:.0%} of the gradient values that are nonzero in float32 ({record.flushed:,} of "
                f"{record.nonzero_reference:,}, loss {record.loss}) are 0 or non-finite, so those weights do "
                f"not move; worst: {names}. {advice[0].upper()}{advice[1:]}",
                fix=_loss_scaling_fix(ctx) if record.loss_scaling == "none" else None,
            )
        )
    return found


def _anchor(ctx: TraceContext, record: GradientRecord, model_name: str | None) -> int | None:
    """The line that assigns the script's optimizer (custom loop), else its `compile(` call."""
    static = ctx.static
    if static is None:
        return None
    name = record.optimizer
    optimizers = [
        stmt
        for stmt in static.tree.body
        if isinstance(stmt, ast.Assign)
        and any(isinstance(t, ast.Name) and (t.id == name or "optim" in t.id) for t in stmt.targets)
    ]
    if optimizers:
        return optimizers[-1].lineno
    calls = [c for c in static.calls if isinstance(c.func, ast.Attribute) and c.func.attr == "compile"]
    return calls[0].lineno if calls else None


def _loss_scaling_fix(ctx: TraceContext) -> Fix | None:
    """MP501's rewrite of the file's training loop, when it has one."""
    return None if ctx.static is None else loss_scaling_fix(ctx.static)
