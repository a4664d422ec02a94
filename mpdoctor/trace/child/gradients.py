"""Gradients under trace (MP504): for a model the file trains, one training step's gradients on the sample batch in
float32 and under the model's own policy, with the loss scaling the script uses, compared per variable.

What "the file trains" means: the model is compiled (its compiled loss, and the optimizer compile() made: under
mixed_float16 a LossScaleOptimizer unless the file turned that off), or the file holds a Keras loss object and an
optimizer at module level (a custom training loop: that loss, and that optimizer's loss scaling if it is a
LossScaleOptimizer, none otherwise). The step is a forward pass in inference mode (dropout off, batch statistics
from the moving averages, so both runs compute the same function and no state changes), the loss against zero
labels (dense or, if the loss wants them, sparse), the loss multiplied by the loss scale, the gradients of the
trainable variables divided by it in float32: exactly what the optimizer would apply. No update is applied.

A value counts as flushed when it is nonzero in float32 and zero (or non-finite) under the policy.
"""

from __future__ import annotations

from mpdoctor.facts.dtypes import LOW_PRECISION
from mpdoctor.facts.keras_semantics import layer_compute_dtype, sublayers
from mpdoctor.facts.schema import GradientRecord, ModelRecord, VariableGradient
from mpdoctor.facts.trace_request import NumericsRequest
from mpdoctor.trace.child import numerics
from mpdoctor.trace.child.keras_adapter import restore_layer_policy, set_layer_policy

MAX_VARIABLES = 20  # per-variable rows kept: the ones with the most flushed values


def gradient_record(
    model,
    record: ModelRecord,
    module,
    numerics_request: NumericsRequest | None,
    *,
    loss_scale: float | None = None,
    sample=None,
) -> GradientRecord | None:
    """None when the file does not train this model (or its numerics did not run). `mpdoctor plan` passes
    `loss_scale` (the step as if the script scaled its loss by this: what loss scaling would do for a script without
    it) and its `sample` batch (its configurations may leave no layer in float16, where a new sample is refused)."""
    if record.numerics is None or record.numerics.skipped or record.error is not None:
        return None
    loss, loss_name, optimizer, optimizer_name = _training(model, module)
    if loss is None:
        return None
    result = GradientRecord(policy=str(record.numerics.dtype or ""), loss=loss_name)
    try:
        _run(model, result, loss, optimizer, optimizer_name, numerics_request, loss_scale, sample)
    except Exception as exc:
        result.skipped = f"internal error: {type(exc).__name__}: {str(exc)[:300]}"
    return result


def _training(model, module):
    """(loss callable, its name, optimizer or None, where the optimizer comes from)."""
    compiled = bool(getattr(model, "compiled", False) or getattr(model, "_is_compiled", False))
    if compiled and getattr(model, "loss", None) is not None:

        def compiled_loss(y, y_pred):
            try:
                return model.compute_loss(x=None, y=y, y_pred=y_pred)
            except TypeError:  # tf_keras spells it positionally
                return model.compute_loss(None, y, y_pred)

        return compiled_loss, "the compiled loss", getattr(model, "optimizer", None), "compile()"
    loss = optimizer = None
    loss_name = optimizer_name = ""
    for name, value in vars(module).items() if module is not None else ():
        classes = {c.__name__ for c in type(value).__mro__}
        if loss is None and "Loss" in classes and callable(value):
            loss, loss_name = value, f"`{name}` ({type(value).__name__})"
        if optimizer is None and ("Optimizer" in classes or "OptimizerV2" in classes):
            optimizer, optimizer_name = value, name
    if loss is None or optimizer is None:
        return None, "", None, ""
    return loss, loss_name, optimizer, optimizer_name


def loss_scaling(optimizer) -> tuple[str, float]:
    """The loss scaling an optimizer applies: ("none", 1) or ("LossScaleOptimizer", its current scale)."""
    # tf_keras names its classes LossScaleOptimizerV3 / BaseLossScaleOptimizer.
    if optimizer is None or not any("LossScaleOptimizer" in c.__name__ for c in type(optimizer).__mro__):
        return "none", 1.0
    # Keras 3: dynamic_scale once built, initial_scale before; tf_keras: loss_scale.
    for attribute in ("dynamic_scale", "initial_scale", "loss_scale"):
        value = getattr(optimizer, attribute, None)
        if value is not None:
            try:
                return "LossScaleOptimizer", float(value.numpy() if hasattr(value, "numpy") else value)
            except Exception:
                continue
    return "LossScaleOptimizer", 1.0


def _run(
    model,
    result: GradientRecord,
    loss,
    optimizer,
    optimizer_name: str,
    numerics_request: NumericsRequest | None,
    loss_scale: float | None = None,
    sample=None,
) -> None:
    import numpy as np

    if sample is None:
        session = numerics.Session(model, numerics.enabled_options(numerics_request), None)
        if not session.ready:
            result.skipped = session.record.skipped or "no sample batch"
            return
        sample = session.sample
    kind, scale = ("assumed LossScaleOptimizer", loss_scale) if loss_scale else loss_scaling(optimizer)
    result.loss_scaling = kind
    result.loss_scale = scale
    result.optimizer = optimizer_name
    variables = list(model.trainable_variables)
    if not variables:
        result.skipped = "the model has no trainable variables"
        return
    state = [v.numpy() for v in model.non_trainable_variables]
    low = _step(model, sample, loss, variables, scale)
    saved = [
        set_layer_policy(layer, "float32")
        for layer in sublayers(model, recursive=True, include_self=True)
        if layer_compute_dtype(layer) in LOW_PRECISION
    ]
    try:
        reference = _step(model, sample, loss, variables, 1.0)
    finally:
        for entry in saved:
            restore_layer_policy(entry)
        for variable, value in zip(model.non_trainable_variables, state, strict=False):
            variable.assign(value)
    if low is None or reference is None:
        result.skipped = "the loss could not be computed on the sample batch with zero labels"
        return
    result.loss_value, low_grads = low
    result.loss_finite = bool(np.isfinite(result.loss_value))
    _, ref_grads = reference
    owners = _owners(model)
    rows = []
    for variable, got, want in zip(variables, low_grads, ref_grads, strict=True):
        if got is None or want is None:
            continue
        nonzero = want != 0
        row = VariableGradient(
            name=variable_name(variable),
            layer=owners.get(id(variable)),
            values=int(want.size),
            nonzero_reference=int(nonzero.sum()),
            flushed=int((nonzero & ((got == 0) | ~np.isfinite(got))).sum()),
            nonfinite=int((~np.isfinite(got)).sum()),
            max_abs_reference=float(np.max(np.abs(want))) if want.size else 0.0,
        )
        rows.append(row)
    rows.sort(key=lambda r: -r.flushed)
    # The totals must stay right when rows are dropped: the rest is summed into one row.
    kept, rest = rows[:MAX_VARIABLES], rows[MAX_VARIABLES:]
    if rest:
        kept.append(
            VariableGradient(
                name=f"({len(rest)} more variables)",
                values=sum(r.values for r in rest),
                nonzero_reference=sum(r.nonzero_reference for r in rest),
                flushed=sum(r.flushed for r in rest),
                nonfinite=sum(r.nonfinite for r in rest),
            )
        )
    result.variables = kept


def variable_name(variable) -> str:
    """How a VariableGradient names its variable (Keras 3: its path; tf_keras: its name)."""
    return str(getattr(variable, "path", None) or variable.name)


def _step(model, sample, loss, variables, scale: float):
    """(loss value, [gradient as float32 numpy or None]) of one step, or None when the loss cannot be computed."""
    import numpy as np
    import tensorflow as tf

    with tf.GradientTape() as tape:
        predictions = model(sample, training=False)
        value = None
        for sparse in (False, True):
            try:
                value = loss(zero_labels(predictions, sparse), predictions)
                break
            except Exception:
                continue
        if value is None:
            return None
        value = tf.reduce_mean(tf.cast(value, tf.float32)) if value.shape.rank else value
        scaled = tf.cast(value, tf.float32) * scale
    grads = tape.gradient(scaled, variables)
    out = [None if g is None else np.asarray(tf.cast(tf.convert_to_tensor(g), tf.float32)) / scale for g in grads]
    return float(tf.cast(value, tf.float32)), out


def zero_labels(predictions, sparse: bool):
    """Labels of zeros for these predictions: class ids (`sparse`) or tensors of their shape."""
    import tensorflow as tf

    from mpdoctor.trace.child.layer_api import flatten

    flat = [p for p in flatten(predictions, []) if hasattr(p, "shape")]
    made = [tf.zeros(p.shape[:-1], tf.int32) if sparse else tf.zeros(p.shape, tf.float32) for p in flat]
    return made[0] if len(made) == 1 else made


def _owners(model) -> dict[int, str]:
    """id(variable) -> name of the layer holding it (the innermost one)."""
    owners = {}
    for layer in sublayers(model, recursive=True):
        for variable in getattr(layer, "trainable_weights", []) or []:
            owners[id(variable)] = getattr(layer, "name", "")
    return owners
