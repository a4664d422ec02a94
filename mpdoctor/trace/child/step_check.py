"""A loss-scaling fix verified by training (issue 19), in the trace child of the fixed file: its training step
function is called once on the sample batch under the file's policy, and once from the same weights and optimizer
state with the model computing in float32 and the loss scale at 1; the two weight updates are compared.

Why that reference: with the scale at 1 and float32 layers, scaling the loss, unscaling the gradients and clipping
them are what the code does without mixed precision, so a rewrite that clips while the gradients are still scaled,
scales twice or never unscales moves the weights 2**15 times too little or too much under the policy and not in the
reference. (The reference with the file's own scale would share those mistakes.)

Both calls run eagerly (`tf.config.run_functions_eagerly`): a `tf.function` step traced under float16 would
otherwise replay its float16 graph in the float32 call. Labels are zeros shaped like the model's outputs (dense, or
sparse if the step rejects dense ones), as MP504's step has them. The model's variables (weights, batch statistics)
and the optimizers' (slots, iterations, the dynamic scale) are restored after each call and at the end. Dynamic
loss scaling skips a step whose scaled gradients overflow and lowers the scale: the low-precision call is repeated
(weights restored, the optimizer kept) until the weights move. The float32 reference runs twice, the second time
without restoring the model's non-trainable variables (seed states among them): when the two disagree (dropout,
random augmentation in the step), the step is random and nothing is claimed either way.
"""

from __future__ import annotations

from mpdoctor.facts.dtypes import LOW_PRECISION
from mpdoctor.facts.keras_semantics import layer_compute_dtype, sublayers
from mpdoctor.facts.schema import StepCheckRecord
from mpdoctor.facts.trace_request import NumericsRequest, StepCheckRequest
from mpdoctor.trace.child import numerics
from mpdoctor.trace.child.gradients import loss_scaling, zero_labels  # MP504's step: the same labels and scale
from mpdoctor.trace.child.keras_adapter import restore_layer_policy, set_layer_policy

MAX_ATTEMPTS = 8  # low-precision calls until the weights move (2**15 halved 8 times is 128)
SELF_AGREEMENT = 0.999  # the two float32 reference calls must agree at least this well (cosine)


def step_check(
    module, models: list, request: StepCheckRequest, numerics_request: NumericsRequest | None
) -> StepCheckRecord:
    """The comparison for the function the request names; never raises (a failure is `skipped`)."""
    record = StepCheckRecord(function=request.function)
    try:
        _compare(module, models, record, numerics_request)
    except Exception as exc:
        record.skipped = f"the step could not be run: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return record


def _compare(module, models: list, record: StepCheckRecord, numerics_request: NumericsRequest | None) -> None:
    import numpy as np
    import tensorflow as tf

    step = getattr(module, record.function, None) if module is not None else None
    if not callable(step):
        record.skipped = f"`{record.function}` is not a function of the module once it is imported"
        return
    model = next((m for m in models if getattr(m, "trainable_variables", None)), None)
    if model is None:
        record.skipped = "no model with trainable variables was found"
        return
    session = numerics.Session(model, numerics.enabled_options(numerics_request), None)
    if not session.ready:
        record.skipped = session.record.skipped or "no sample batch"
        return
    variables = list(model.trainable_variables)
    optimizers = _optimizers(module)
    for optimizer in optimizers:
        _build(optimizer, variables)
    state = _State(variables, list(model.non_trainable_variables), [v for o in optimizers for v in _variables_of(o)])
    predictions = model(session.sample, training=False)
    calls = [(session.sample, zero_labels(predictions, sparse)) for sparse in (False, True)]
    eager = tf.config.functions_run_eagerly()
    tf.config.run_functions_eagerly(True)
    try:
        low, calls, record.attempts = _low_precision_update(step, calls, variables, state)
        record.loss_scale = max((loss_scaling(o)[1] for o in optimizers), default=1.0)
        references = []
        undo = [
            set_layer_policy(layer, "float32")
            for layer in sublayers(model, recursive=True, include_self=True)
            if layer_compute_dtype(layer) in LOW_PRECISION
        ]
        try:
            for second in (False, True):
                # The second call keeps the model's other variables as the first left them: a random step (dropout,
                # whose seed state is such a variable, and whose noise differs between float16 and float32 inputs)
                # then draws anew and the two disagree.
                state.restore(keep_model_state=second)
                if not all(_set_scale(o, 1.0) for o in optimizers):
                    record.skipped = "the optimizer's loss scale cannot be set to 1 for the float32 reference"
                    return
                step(*calls[0])
                references.append(state.delta(variables))
        finally:
            for entry in undo:
                restore_layer_policy(entry)
    finally:
        tf.config.run_functions_eagerly(eager)
        state.restore()
    reference = references[0]
    if low is None:
        record.cosine, record.norm_ratio = 0.0, 0.0  # never moved: the fixed step does not train
        if not np.any(reference):
            record.skipped = "the float32 step does not move the weights either"
        return
    if not np.any(reference):
        record.skipped = "the float32 step does not move the weights"
        return
    if _cosine(references[0], references[1]) < SELF_AGREEMENT:
        record.skipped = "two float32 steps from the same weights differ (the step is random: dropout?)"
        return
    record.cosine = _cosine(low, reference)
    record.norm_ratio = float(np.linalg.norm(low) / np.linalg.norm(reference))


def _low_precision_update(step, calls: list, variables: list, state: _State):
    """(the update as one float64 vector or None if no call moved the weights, [the call that runs], calls made).
    The first call tries dense labels, then sparse ones."""
    import numpy as np

    error = None
    for attempt in range(1, MAX_ATTEMPTS + 1):
        for arguments in calls:
            state.restore(keep_optimizer=True)
            try:
                step(*arguments)
            except Exception as exc:  # the other label form, or the step's own error when both fail
                error = error or exc
                continue
            calls = [arguments]
            delta = state.delta(variables)
            if np.any(delta):
                return delta, calls, attempt
            break
        else:
            raise error
    return None, calls, MAX_ATTEMPTS


def _cosine(a, b) -> float:
    import numpy as np

    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / norms) if norms else 0.0


class _State:
    """Values to come back to: the trainable weights, the model's other variables (batch statistics, seed states)
    and the optimizers' variables."""

    def __init__(self, weights: list, model_state: list, optimizer_variables: list) -> None:
        self.weights = [(v, v.numpy()) for v in _unique(weights)]
        known = {id(v) for v, _ in self.weights}
        self.model_state = [(v, v.numpy()) for v in _unique(model_state) if id(v) not in known]
        known |= {id(v) for v, _ in self.model_state}
        self.optimizer = [(v, v.numpy()) for v in _unique(optimizer_variables) if id(v) not in known]

    def restore(self, keep_optimizer: bool = False, keep_model_state: bool = False) -> None:
        """`keep_optimizer`: a skipped low-precision step keeps the scale it lowered."""
        for variable, value in [
            *self.weights,
            *(() if keep_model_state else self.model_state),
            *(() if keep_optimizer else self.optimizer),
        ]:
            variable.assign(value)

    def delta(self, variables: list):
        import numpy as np

        start = {id(v): value for v, value in self.weights}
        parts = [(np.asarray(v.numpy(), dtype="float64") - start[id(v)]).ravel() for v in variables]
        return np.concatenate(parts) if parts else np.zeros(0)


def _unique(variables: list) -> list:
    seen, kept = set(), []
    for variable in variables:
        if id(variable) not in seen:
            seen.add(id(variable))
            kept.append(variable)
    return kept


def _optimizers(module) -> list:
    """The module's optimizer objects (a custom loop's, as MP504 finds them): what the step applies through."""
    found = []
    for value in list(vars(module).values()):
        names = {c.__name__ for c in type(value).__mro__}
        if ("Optimizer" in names or "OptimizerV2" in names) and not any(value is f for f in found):
            found.append(value)
    return found


def _build(optimizer, variables: list) -> None:
    """Create the optimizer's slots and scale now, so that both calls start from the same optimizer state (Keras 3
    and tf_keras build on their first apply otherwise)."""
    built = getattr(optimizer, "built", None)
    if built is None:
        built = getattr(optimizer, "_built", None)
    if built is False and callable(getattr(optimizer, "build", None)):
        optimizer.build(variables)


def _variables_of(optimizer) -> list:
    variables = getattr(optimizer, "variables", None)
    if callable(variables):  # tf_keras' OptimizerV2 spells it as a method
        variables = variables()
    return list(variables or [])


def _set_scale(optimizer, value: float) -> bool:
    """Set a LossScaleOptimizer's current scale (False when it has one that cannot be set); True otherwise."""
    if loss_scaling(optimizer)[0] == "none":
        return True
    # Keras 3: dynamic_scale (a variable once built); tf_keras: the dynamic state's current scale.
    for holder, attribute in (
        (optimizer, "dynamic_scale"),
        (getattr(optimizer, "_loss_scale", None), "_current_loss_scale"),
    ):
        variable = getattr(holder, attribute, None) if holder is not None else None
        if variable is not None and hasattr(variable, "assign"):
            variable.assign(value)
            return True
    return False
