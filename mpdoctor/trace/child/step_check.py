"""A loss-scaling fix verified by training (issue 19), in the trace child of the fixed file: its training step
function is called once on the sample batch under the file's policy, and once from the same weights and optimizer
state with the model computing in float32 and the loss scale at 1; the two weight updates are compared.

Why that reference: with the scale at 1 and float32 layers, scaling the loss, unscaling the gradients and clipping
them are what the code does without mixed precision, so a rewrite that clips while the gradients are still scaled,
scales twice or never unscales moves the weights 2**15 times too little or too much under the policy and not in the
reference. (The reference with the file's own scale would share those mistakes.)

What is compared (issue 30): the models and optimizers the step itself reads (trace/child/step_target.py: module
globals, closure cells, the trainer object it is a method of), not the discovery's instances, which are other models
when the file builds its model in a function. The step is called with a sample batch of such a model and labels
shaped for its outputs: one-hot (a categorical cross-entropy against zeros trains nothing), sparse class ids, or
class ids in a column, whichever the step accepts; a step of one parameter (a GAN's) gets the batch alone. A first
call finds those arguments and builds the optimizers on the variables the step applies to; the weights are then
restored and both compared calls start from that optimizer state.

All calls run eagerly (`tf.config.run_functions_eagerly`): a `tf.function` step traced under float16 would
otherwise replay its float16 graph in the float32 call. The random seeds are reset before each call, and dropout and
noise layers are turned off for the check (float16 and float32 inputs draw different masks from the same seed; loss
scaling is the same without them). The models' variables (weights, batch statistics) and the optimizers' (slots,
iterations, the dynamic scale) are restored after each call and at the end. Dynamic loss scaling skips a step whose
scaled gradients overflow and lowers the scale: the low-precision call is repeated (weights restored, the optimizer
kept) until the weights move. The float32 reference runs twice, the second time without restoring the models'
non-trainable variables: when the two disagree (noise the seeds do not fix, as a `tf.random.Generator`'s), the step
is random and nothing is claimed either way.
"""

from __future__ import annotations

from dataclasses import replace

from mpdoctor.facts.keras_semantics import RANDOM_LAYER_RATES, sublayers
from mpdoctor.facts.schema import StepCheckRecord
from mpdoctor.facts.trace_request import NumericsRequest, StepCheckRequest
from mpdoctor.trace.child import backends, numerics, samples
from mpdoctor.trace.child.gradients import zero_labels
from mpdoctor.trace.child.numerics import SEED, seed_random
from mpdoctor.trace.child.step_target import StepTarget, find_step
from mpdoctor.trace.child.training_step import computing_in_float32, loss_scaling  # MP504's step: the same scale

MAX_ATTEMPTS = 8  # low-precision calls until the weights move (2**15 halved 8 times is 128)
STEP_BATCH = 16  # sample rows: micro-batches of 2, 4, 8 or 16 split it evenly; batch statistics are not degenerate
SELF_AGREEMENT = 0.999  # the two float32 reference calls must agree at least this well (cosine)


def step_check(
    module, models: list, request: StepCheckRequest, numerics_request: NumericsRequest | None
) -> StepCheckRecord:
    """The comparison for the function the request names; never raises (a failure is `skipped`)."""
    record = StepCheckRecord(function=request.function)
    if not backends.tensorflow():  # nothing claimed either way: the fix is not verified by training here
        record.skipped = f"not available on the {backends.current()} backend (the step check runs on TensorFlow)"
        return record
    try:
        _compare(module, models, record, numerics_request)
    except Exception as exc:
        record.skipped = f"the step could not be run: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return record


def _compare(module, models: list, record: StepCheckRecord, numerics_request: NumericsRequest | None) -> None:
    import tensorflow as tf

    target = find_step(module, record.function, models)
    if target.step is None:
        record.skipped = target.problem
        return
    step, optimizers = target.step, target.optimizers
    variables = _unique([v for m in target.models for v in m.trainable_variables])
    model_state = [v for m in target.models for v in m.non_trainable_variables]
    eager = tf.config.functions_run_eagerly()
    tf.config.run_functions_eagerly(True)
    quiet = _quiet_random_layers(target.models)
    weights = _State(variables, model_state, [])
    try:
        # The first call finds the arguments the step accepts and builds the optimizers (their slots and scale) on
        # the variables the step applies to; both compared calls then start from that optimizer state.
        calls = _calls(target, numerics_request)
        calls = _first_call(step, calls, weights)
        weights.restore()
        state = _State(variables, model_state, [v for o in optimizers for v in _variables_of(o)])
        low, calls, record.attempts = _low_precision_update(step, calls, variables, state)
        record.loss_scale = max((loss_scaling(o)[1] for o in optimizers), default=1.0)
        references = []
        with computing_in_float32(*target.models):
            for second in (False, True):
                # The second call keeps the model's other variables as the first left them: a random step (noise
                # drawn in the step itself) then draws anew and the two disagree.
                state.restore(keep_model_state=second)
                if not all(_set_scale(o, 1.0) for o in optimizers):
                    record.skipped = "the optimizer's loss scale cannot be set to 1 for the float32 reference"
                    return
                seed_random(SEED)
                step(*calls[0])
                references.append(state.delta(variables))
        state.restore()
    finally:
        for layer, attribute, value in quiet:
            setattr(layer, attribute, value)
        tf.config.run_functions_eagerly(eager)
        weights.restore()
    reference = references[0]
    _judge(record, low, reference, references[1])


def _judge(record: StepCheckRecord, low, reference, again) -> None:
    import numpy as np

    if not np.all(np.isfinite(reference)) or not np.all(np.isfinite(again)):
        record.skipped = "the float32 step makes the weights non-finite"
        return
    if low is None:
        record.cosine, record.norm_ratio = 0.0, 0.0  # never moved: the fixed step does not train
        if not np.any(reference):
            record.skipped = "the float32 step does not move the weights either"
        return
    if not np.any(reference):
        record.skipped = "the float32 step does not move the weights"
        return
    if _cosine(reference, again) < SELF_AGREEMENT:
        record.skipped = "two float32 steps from the same weights differ (the step draws random numbers)"
        return
    if not np.all(np.isfinite(low)):
        record.cosine, record.norm_ratio = 0.0, float("inf")
        return
    record.cosine = _cosine(low, reference)
    record.norm_ratio = float(np.linalg.norm(low) / np.linalg.norm(reference))


def _calls(target: StepTarget, numerics_request: NumericsRequest | None) -> list[tuple]:
    """The argument tuples to try: a sample batch of each model the step reads (its first is usually the one fed),
    with labels shaped for the outputs of that model: dense (one-hot), sparse class ids, sparse ids in a column."""
    options = numerics.enabled_options(numerics_request)
    if not options.sample:  # a step may split its batch (gradient accumulation) or normalise over it
        options = replace(options, batch_size=max(int(options.batch_size), STEP_BATCH))
    calls: list[tuple] = []
    for model in target.models:
        try:
            sample = samples.sample_batch(model, options)
        except Exception:
            continue
        if sample is None:
            continue
        if 2 in target.arguments:
            seed_random(SEED)
            predictions = model(sample.value, training=False)
            calls.extend((sample.value, labels) for labels in step_labels(predictions))
        if 1 in target.arguments:
            calls.append((sample.value,))
    if not calls:
        raise LookupError("no sample batch can be built for the models the step reads")
    return calls


def step_labels(predictions) -> list:
    """Labels for these predictions in the forms a step's loss may want. Dense labels are one-hot (class 0), not
    zeros: a categorical cross-entropy against all-zero labels is 0 and trains nothing."""
    import tensorflow as tf

    sparse = zero_labels(predictions, sparse=True)
    flat_sparse = sparse if isinstance(sparse, list) else [sparse]
    dense = zero_labels(predictions, sparse=False)
    flat_dense = dense if isinstance(dense, list) else [dense]
    one_hot = [
        tf.one_hot(s, int(d.shape[-1] or 1)) if d.shape.rank else d
        for s, d in zip(flat_sparse, flat_dense, strict=True)
    ]
    column = [tf.expand_dims(s, -1) for s in flat_sparse]

    def shaped(items: list):
        return items[0] if len(items) == 1 else items

    return [shaped(one_hot), sparse, shaped(column)]


def _first_call(step, calls: list, weights: _State) -> list:
    """[the arguments the step accepts]; raises the step's own error when it accepts none."""
    error = None
    for arguments in calls:
        seed_random(SEED)
        try:
            step(*arguments)
        except Exception as exc:  # another label form or another model's sample may fit
            error = error or exc
            weights.restore()
            continue
        return [arguments]
    raise error if error is not None else LookupError("no arguments to call the step with")


def _quiet_random_layers(models: list) -> list:
    """Turn off dropout and noise layers for the check (float16 and float32 inputs draw different noise; loss scaling
    is the same with or without it): [(layer, attribute, value to restore)]."""
    changed = []
    for model in models:
        for layer in sublayers(model, recursive=True):
            attribute = RANDOM_LAYER_RATES.get(type(layer).__name__)
            if attribute is None:
                continue
            value = getattr(layer, attribute, None)
            if isinstance(value, (int, float)) and value:
                changed.append((layer, attribute, value))
                setattr(layer, attribute, 0.0)
    return changed


def _low_precision_update(step, calls: list, variables: list, state: _State):
    """(the update as one float64 vector or None if no call moved the weights, [the call that runs], calls made).
    The first call tries dense labels, then sparse ones."""
    import numpy as np

    error = None
    for attempt in range(1, MAX_ATTEMPTS + 1):
        for arguments in calls:
            state.restore(keep_optimizer=True)
            seed_random(SEED)
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
