"""A loss-scaling fix verified by training (issue 19), in the trace child of the fixed file: its training step
function is called once on the sample batch under the file's policy, and once from the same weights and optimizer
state with the model computing in float32 and the loss scale at 1; the two weight updates are compared.

Why that reference: with the scale at 1 and float32 layers, scaling the loss, unscaling the gradients and clipping
them are what the code does without mixed precision, so a rewrite that clips while the gradients are still scaled,
scales twice or never unscales moves the weights 2**15 times too little or too much under the policy and not in the
reference. (The reference with the file's own scale would share those mistakes.)

What is compared (issue 30): the models and optimizers the step itself reads (trace/child/step_target.py: module
globals, closure cells, the trainer object it is a method of), not the discovery's instances, which are other models
when the file builds its model in a function. The step is called as user_step.py calls it for MP504: a sample batch
of such a model and labels for its outputs drawn from its float32 predictions (training_step.training_labels) in
the forms a loss may want (dense, sparse class ids, class ids in a column), whichever the step accepts; a step of one
parameter (a GAN's) gets the batch alone. A first call finds those arguments and builds the optimizers on the
variables the step applies to; the weights are then restored and both compared calls start from that optimizer
state.

All calls run eagerly (`tf.config.run_functions_eagerly`): a `tf.function` step traced under float16 would
otherwise replay its float16 graph in the float32 call. The random seeds are reset before each call, and the layers
that draw random numbers (dropout, noise, augmentation such as RandomFlip) run in inference mode for the check:
MP504's step finds them (training_step.TrainingStep: the float32 step run from two seeds, the innermost layers whose
outputs change while their inputs do not). float16 and float32 inputs draw different masks from the same seed; loss
scaling is the same without them. The models' variables (weights, batch statistics) and the optimizers' (slots,
iterations, the dynamic scale) are restored after each call and at the end. Dynamic loss scaling skips a step whose
scaled gradients overflow and lowers the scale: the low-precision call is repeated (weights restored, the optimizer
kept) until the weights move. The float32 reference runs twice, the second time without restoring the models'
non-trainable variables: when the two disagree (noise the seeds do not fix, as a `tf.random.Generator`'s), the step
is random and nothing is claimed either way.
"""

from __future__ import annotations

from mpdoctor.facts.schema import StepCheckRecord
from mpdoctor.facts.trace_request import NumericsRequest, StepCheckRequest
from mpdoctor.trace.child.numerics import SEED, seed_random
from mpdoctor.trace.child.step_target import StepTarget, find_step
from mpdoctor.trace.child.training_step import (  # MP504's step: the same scale, the same random layers
    Training,
    TrainingStep,
    computing_in_float32,
    inference_mode,
    loss_scaling,
    optimizer_variables,
    set_scale,
    unique,
)
from mpdoctor.trace.child.user_step import State, UserStep, eager, first_call, step_calls

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
    target = find_step(module, record.function, models)
    if target.step is None:
        record.skipped = target.problem
        return
    step, optimizers = target.step, target.optimizers
    variables = unique([v for m in target.models for v in m.trainable_variables])
    model_state = [v for m in target.models for v in m.non_trainable_variables]
    weights = State(variables, model_state, [])
    with eager():
        try:
            # The first call finds the arguments the step accepts and builds the optimizers (their slots and scale)
            # on the variables the step applies to; both compared calls then start from that optimizer state.
            arguments = first_call(step, step_calls(target, numerics_request), weights)
            random = _random_layers(record.function, target, arguments)
            state = State(variables, model_state, [v for o in optimizers for v in optimizer_variables(o)])
            with inference_mode(random):
                low, record.attempts = _low_precision_update(step, arguments, variables, state)
                record.loss_scale = max((loss_scaling(o)[1] for o in optimizers), default=1.0)
                references = _references(step, arguments, target, variables, state)
            state.restore()
        finally:
            weights.restore()
    if references is None:
        record.skipped = "the optimizer's loss scale cannot be set to 1 for the float32 reference"
        return
    reference = references[0]
    _judge(record, low, reference, references[1])


def _references(step, arguments: tuple, target: StepTarget, variables: list, state: State) -> list | None:
    """Two float32 updates at loss scale 1 from the same start (None when the scale cannot be set). The second
    keeps the model's other variables as the first left them: a random step (noise drawn in the step itself) then
    draws anew and the two disagree."""
    references = []
    with computing_in_float32(*target.models):
        for second in (False, True):
            state.restore(keep_model_state=second)
            if not all(set_scale(o, 1.0) for o in target.optimizers):
                return None
            seed_random(SEED)
            step(*arguments)
            references.append(state.delta(variables))
    return references


def _random_layers(name: str, target: StepTarget, arguments: tuple) -> list:
    """The layers that draw random numbers in the step (dropout, noise, augmentation such as RandomFlip), found as
    MP504's step finds them: the float32 step run from two seeds (training_step.TrainingStep). float16 and float32
    inputs draw different noise from the same seed; loss scaling is the same with or without it."""
    user = UserStep(name, target, arguments)
    finder = TrainingStep(target.models[0], None, Training(lambda y, p: None, "", None, ""), user=user)
    finder.reference()
    return finder.random_layers


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


def _low_precision_update(step, arguments: tuple, variables: list, state: State):
    """(the update as one float64 vector or None if no call moved the weights, calls made). A dynamic loss scale
    lowered by a skipped step is kept for the next call."""
    import numpy as np

    for attempt in range(1, MAX_ATTEMPTS + 1):
        state.restore(keep_optimizer=True)
        seed_random(SEED)
        step(*arguments)
        delta = state.delta(variables)
        if np.any(delta):
            return delta, attempt
    return None, MAX_ATTEMPTS


def _cosine(a, b) -> float:
    import numpy as np

    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / norms) if norms else 0.0
