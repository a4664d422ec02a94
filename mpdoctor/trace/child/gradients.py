"""Gradients under trace (MP504): for a model the file trains, one training step's gradients on the sample batch in
float32 and under the model's own policy, with the loss scaling the script uses, compared per variable.

The step is `training_step.TrainingStep` (issue 30): training mode, seeded labels that give a real loss, random
layers fixed, a dynamic loss scale judged after it settles, the float32 reference from the same weights. What "the
file trains" means: the file's own step that the static pass names (TraceRequest.training_steps: a GradientTape
step, or a JAX or PyTorch one) when it trains the model, run itself with its own loss (user_step.py); else
`training_step.training_of`: the model is compiled, or the file holds a Keras loss object and an optimizer at module
level, differentiated by the backend's own gradient API (backends.loss_and_gradients). No update is kept.

A value counts as flushed when it is nonzero in float32 and zero (or non-finite) under the policy.
"""

from __future__ import annotations

from mpdoctor.facts.keras_semantics import sublayers
from mpdoctor.facts.schema import GradientRecord, ModelRecord, VariableGradient
from mpdoctor.facts.trace_request import NumericsRequest
from mpdoctor.trace.child import numerics
from mpdoctor.trace.child.training_step import (
    Training,
    TrainingStep,
    dynamic_scaling,
    loss_scaling,
    training_of,
)
from mpdoctor.trace.child.user_step import prepare_user_step

__all__ = ["gradient_record", "loss_scaling", "prepare", "variable_name"]

MAX_VARIABLES = 20  # per-variable rows kept: the ones with the most flushed values


def prepare(
    model, module, numerics_request: NumericsRequest | None, sample=None, steps: list[str] | None = None
) -> TrainingStep | str | None:
    """The training step of a model the file trains, the reason it cannot be run (str), or None when the file does
    not train it. `steps`: the file's own training steps the static pass names (TraceRequest.training_steps): the
    first that trains this model is the step judged, with its own loss."""
    for name in steps or ():
        own = _own_step(model, module, numerics_request, name)
        if own is not None:
            return own
    training = training_of(model, module)
    if training is None:
        return None
    if sample is None:
        session = numerics.Session(model, numerics.enabled_options(numerics_request), None)
        if not session.ready:
            return session.record.skipped or "no sample batch"
        sample = session.sample
    return TrainingStep(model, sample, training)


def _own_step(model, module, numerics_request: NumericsRequest | None, name: str) -> TrainingStep | str | None:
    """The user's step `name` as the training step of `model` (None when it does not train it)."""
    user = prepare_user_step(module, name, model, numerics_request)
    if user is None or isinstance(user, str):
        return user
    scaling = [o for o in user.target.optimizers if loss_scaling(o)[0] != "none"]
    optimizer = next(iter(scaling or user.target.optimizers), None)
    optimizer_name = next((n for n, v in vars(module).items() if v is optimizer), "") or name
    training = Training(lambda y, p: None, f"of the step `{name}`", optimizer, optimizer_name)
    return TrainingStep(model, None, training, user=user)


def gradient_record(
    model,
    record: ModelRecord,
    module,
    numerics_request: NumericsRequest | None,
    *,
    loss_scale: float | None = None,
    sample=None,
    step: TrainingStep | None = None,
    steps: list[str] | None = None,
) -> GradientRecord | None:
    """None when the file does not train this model (or its numerics did not run). `mpdoctor plan` passes
    `loss_scale` (the step as if the script scaled its loss by this: what loss scaling would do for a script without
    it), its `sample` batch and its `step` (one float32 reference for every configuration it tries)."""
    if record.numerics is None or record.numerics.skipped or record.error is not None:
        return None
    prepared = step if step is not None else prepare(model, module, numerics_request, sample, steps)
    if prepared is None:
        return None
    result = GradientRecord(policy=str(record.numerics.dtype or ""))
    if isinstance(prepared, str):
        result.skipped = prepared
        return result
    result.loss = prepared.training.loss_name
    try:
        _run(model, result, prepared, loss_scale)
    except Exception as exc:
        result.skipped = f"internal error: {type(exc).__name__}: {str(exc)[:300]}"
    return result


def _run(model, result: GradientRecord, step: TrainingStep, loss_scale: float | None) -> None:
    import numpy as np

    optimizer = step.training.optimizer
    if loss_scale:
        kind, scale, dynamic = "assumed LossScaleOptimizer", loss_scale, True
    else:
        (kind, scale), dynamic = loss_scaling(optimizer), dynamic_scaling(optimizer)
    result.loss_scaling = kind
    result.optimizer = step.training.optimizer_name
    variables = step.variables
    if not variables:
        result.skipped = "the model has no trainable variables"
        return
    reference = step.reference()
    low = step.low(scale, dynamic) if reference is not None else None
    result.labels = step.labels_made
    result.inference_layers = list(step.inference_layers)
    if low is None or reference is None:
        result.skipped = step.problem or "the training step could not be run"
        return
    result.loss_scale = low.scale
    result.skipped_steps = low.skipped_steps
    if low.loss_value is not None:
        result.loss_value = low.loss_value
        result.loss_finite = bool(np.isfinite(low.loss_value))
    owners = _owners(model)
    rows = []
    variables = reference.variables or variables
    if len(low.gradients) != len(variables):  # the step took another path under the policy
        result.skipped = "the training step differentiates other variables under the policy than in float32"
        return
    for variable, got, want in zip(variables, low.gradients, reference.gradients, strict=True):
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


def _owners(model) -> dict[int, str]:
    """id(variable) -> name of the layer holding it (the innermost one)."""
    owners = {}
    for layer in sublayers(model, recursive=True):
        for variable in getattr(layer, "trainable_weights", []) or []:
            owners[id(variable)] = getattr(layer, "name", "")
    return owners
