"""The user's own training step, run for its gradients (MP504, issue 30) and for the fix check (step_check.py).

A script with its own `GradientTape` step trains with ITS loss (a down-weighted auxiliary term, a hand-written
MSE), not a compiled one: its gradients are what its `tape.gradient` returns. The step the static pass names
(TraceRequest.training_steps) is found with the models and optimizers it reads (step_target.py), called on a sample
batch of such a model with labels shaped for its outputs (training_step.training_labels, in the forms a loss may
want), and every `tape.gradient` call it makes is recorded. The call runs eagerly (a `tf.function` traced under
float16 would replay its float16 graph in the float32 reference); the optimizers' loss scale is set to the scale
the step is judged at; the weights and the optimizers' variables are restored after every call (the models' other
variables by TrainingStep, which keeps the seed states its first run moves on), so nothing the step applies is
kept.

The recorded gradients are as the step differentiates them: scaled when the step scales its loss (the scale does
not change which values are zero or non-finite, which is what MP504 counts).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from mpdoctor.facts.dtypes import dtype_name
from mpdoctor.facts.trace_request import NumericsRequest
from mpdoctor.trace.child import backends, numerics, samples
from mpdoctor.trace.child.layer_api import flatten
from mpdoctor.trace.child.numerics import SEED, seed_random
from mpdoctor.trace.child.probe import MISSING
from mpdoctor.trace.child.step_target import StepTarget, find_step
from mpdoctor.trace.child.training_step import (
    StepResult,
    loss_scaling,
    optimizer_variables,
    set_scale,
    training_labels,
    unique,
)

STEP_BATCH = 16  # sample rows: micro-batches of 2, 4, 8 or 16 split it evenly; batch statistics are not degenerate


@dataclass
class UserStep:
    """The user's step `name`, callable with `arguments`, recording the gradients of the variables of `wanted`
    (ids; empty: every variable it differentiates)."""

    name: str
    target: StepTarget
    arguments: tuple
    wanted: set[int] = field(default_factory=set)
    labels_made: str = ""
    problem: str | None = None

    @property
    def models(self) -> list:
        return list(self.target.models)

    def run(self, scale: float) -> StepResult | None:
        """One call of the step with the optimizers' loss scale at `scale`; None when it raises (`problem`)."""
        # The models' other variables are TrainingStep's to restore: its first float32 run keeps the seed states
        # the step moved on.
        state = State(
            [v for m in self.models for v in m.trainable_variables],
            [],
            [v for o in self.target.optimizers for v in optimizer_variables(o)],
        )
        recorded: list = []
        try:
            with eager(), _recording(recorded, self.target.optimizers):
                if not all(set_scale(o, scale) for o in self.target.optimizers):
                    self.problem = "the optimizer's loss scale cannot be set"
                    return None
                self.target.step(*self.arguments)  # type: ignore[misc]
        except Exception as exc:
            self.problem = f"the training step `{self.name}` raised {type(exc).__name__}: {numerics.first_line(exc)}"
            return None
        finally:
            state.restore()
        pairs = [(v, g) for v, g, _ in recorded if not self.wanted or id(v) in self.wanted]
        if not pairs:
            self.problem = f"the training step `{self.name}` computes no gradient of the model's variables"
            return None
        loss = next((value for _, _, value in recorded), None)
        gradients = [None if g is None else backends.to_float32(g) for _, g in pairs]
        return StepResult(loss, gradients, scale, variables=[v for v, _ in pairs])


def prepare_user_step(module: Any, name: str, model: Any, request: NumericsRequest | None) -> UserStep | str | None:
    """The step `name` of the module when it trains `model` (None otherwise), or why it cannot be run (str). A first
    call finds the arguments it accepts and builds its optimizers; everything is restored afterwards, the loss
    scale included."""
    target = find_step(module, name, [])
    if target.step is None or not any(m is model for m in target.models):
        return None
    scales = [(o, loss_scaling(o)[1]) for o in target.optimizers]
    state = State(
        [v for m in target.models for v in m.trainable_variables],
        [v for m in target.models for v in m.non_trainable_variables],
        [v for o in target.optimizers for v in optimizer_variables(o)],
    )
    try:
        with eager():
            arguments = first_call(target.step, step_calls(target, request), state)
    except Exception as exc:
        return f"the training step `{name}` could not be run: {type(exc).__name__}: {numerics.first_line(exc)}"
    finally:
        state.restore()
        for optimizer, scale in scales:
            set_scale(optimizer, scale)
    wanted = {id(v) for v in model.trainable_variables}
    return UserStep(name, target, arguments, wanted, labels_made=_labels_made(arguments))


# ---------------------------------------------------------------------------------------------- arguments


def step_calls(target: StepTarget, request: NumericsRequest | None) -> list[tuple]:
    """The argument tuples to try: a sample batch of each model the step reads (its first is usually the one fed),
    with labels for the outputs of that model in the forms a loss may want (step_labels); a step of one parameter
    (a GAN's) gets the batch alone."""
    options = numerics.enabled_options(request)
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
    """Labels for these predictions (training_step.training_labels: they give the loss a real value) in the forms a
    step's loss may want: dense (one-hot, 0/1 or regression targets), sparse class ids, sparse ids in a column."""
    dense = training_labels(predictions, sparse=False)
    sparse = training_labels(predictions, sparse=True)
    flat_sparse = sparse if isinstance(sparse, list) else [sparse]
    column = [backends.constant(backends.to_numpy(s)[..., None]) for s in flat_sparse]
    return [dense, sparse, column[0] if len(column) == 1 else column]


def first_call(step, calls: list, state: State) -> tuple:
    """The arguments the step accepts (the call builds its optimizers); raises the step's own error when it accepts
    none. The weights are restored after each call."""
    error = None
    for arguments in calls:
        seed_random(SEED)
        try:
            step(*arguments)
        except Exception as exc:  # another label form or another model's sample may fit
            error = error or exc
            continue
        finally:
            state.restore()
        return arguments
    raise error if error is not None else LookupError("no arguments to call the step with")


def _labels_made(arguments: tuple) -> str:
    if len(arguments) < 2:
        return "no labels (the step takes the batch alone)"
    kinds = {dtype_name(getattr(x, "dtype", None)) or "" for x in flatten(arguments[1], [])}
    return "class ids" if all(k.startswith("int") for k in kinds) else "seeded targets"


# ---------------------------------------------------------------------------------------------- state


class State:
    """Values to come back to: the trainable weights, the models' other variables (batch statistics, seed states)
    and the optimizers' variables."""

    def __init__(self, weights: list, model_state: list, optimizer_variables: list) -> None:
        self.weights = [(v, v.numpy()) for v in unique(weights)]
        known = {id(v) for v, _ in self.weights}
        self.model_state = [(v, v.numpy()) for v in unique(model_state) if id(v) not in known]
        known |= {id(v) for v, _ in self.model_state}
        self.optimizer = [(v, v.numpy()) for v in unique(optimizer_variables) if id(v) not in known]

    def restore(self, keep_optimizer: bool = False, keep_model_state: bool = False) -> None:
        """`keep_optimizer`: a skipped low-precision step keeps the scale it lowered. On PyTorch the gradients a
        step left in the weights' `.grad` go too: a step that does not zero them would add the next call's."""
        for variable, value in [
            *self.weights,
            *(() if keep_model_state else self.model_state),
            *(() if keep_optimizer else self.optimizer),
        ]:
            variable.assign(value)
        if backends.current() == "torch":
            for variable, _ in self.weights:
                variable.value.grad = None

    def delta(self, variables: list):
        import numpy as np

        start = {id(v): value for v, value in self.weights}
        parts = [(np.asarray(v.numpy(), dtype="float64") - start[id(v)]).ravel() for v in variables]
        return np.concatenate(parts) if parts else np.zeros(0)


# ---------------------------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def eager() -> Iterator[None]:
    """Calls in the block run eagerly (a `tf.function` or `jax.jit` step traced under float16 would replay its
    float16 computation in the float32 reference); PyTorch runs eagerly anyway."""
    backend = backends.current()
    if backend == "jax":
        import jax

        with jax.disable_jit():
            yield
        return
    if backend != "tensorflow":
        yield
        return
    import tensorflow as tf

    eager = tf.config.functions_run_eagerly()
    tf.config.run_functions_eagerly(True)
    try:
        yield
    finally:
        tf.config.run_functions_eagerly(eager)


def _recording(sink: list, optimizers: list):
    """Every gradient the step computes, appended to `sink` as (variable, gradient, loss value or None): on
    TensorFlow what each `tape.gradient` returns; on JAX and PyTorch, where the step differentiates with the backend's
    own API, what it hands to its optimizers (`apply`, `apply_gradients`, `stateless_apply`)."""
    return _taped(sink) if backends.tensorflow() else _applied(sink, optimizers)


@contextlib.contextmanager
def _taped(sink: list) -> Iterator[None]:
    import tensorflow as tf

    original = tf.GradientTape.gradient

    def gradient(tape, target, sources, *args, **kwargs):
        result = original(tape, target, sources, *args, **kwargs)
        value = _mean(target)
        for source, grad in zip(tf.nest.flatten(sources), tf.nest.flatten(result), strict=False):
            sink.append((source, grad, value))
        return result

    tf.GradientTape.gradient = gradient  # type: ignore[method-assign]
    try:
        yield
    finally:
        tf.GradientTape.gradient = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _applied(sink: list, optimizers: list) -> Iterator[None]:
    depth = [0]  # a LossScaleOptimizer's apply_gradients calls its own apply: the outermost call is recorded

    def wrap(optimizer, method: str, bound):
        # Where each method takes its gradients: apply(grads, trainable_variables=None),
        # apply_gradients(grads_and_vars), stateless_apply(optimizer_variables, grads, trainable_variables).
        position, keyword = {"apply": (0, "grads"), "apply_gradients": (0, "grads_and_vars")}.get(method, (1, "grads"))

        def call(*args, **kwargs):
            args = list(args)
            given = args if len(args) > position else kwargs
            key = position if given is args else keyword
            given[key] = values = list(given[key])  # type: ignore[index]  # a generator is read once: a list for both
            # The variables the optimizer was built with, in order (stateless_apply's trainable values are arrays).
            built = getattr(optimizer, "_trainable_variables", [])
            if method == "apply_gradients":
                pairs = [(variable, grad) for grad, variable in values]
            elif method == "apply":
                listed = args[1] if len(args) > 1 else kwargs.get("trainable_variables")
                pairs = list(zip(listed or built, values, strict=False))
            else:
                pairs = list(zip(built, values, strict=False))
            if not depth[0]:
                sink.extend((variable, grad, None) for variable, grad in pairs)
            depth[0] += 1
            try:
                return bound(*args, **kwargs)
            finally:
                depth[0] -= 1

        return call

    patched = []
    try:
        for optimizer in optimizers:
            for method in ("apply", "apply_gradients", "stateless_apply"):
                bound = getattr(optimizer, method, None)
                if bound is not None:
                    patched.append((optimizer, method, optimizer.__dict__.get(method, MISSING)))
                    object.__setattr__(optimizer, method, wrap(optimizer, method, bound))
        yield
    finally:
        for optimizer, method, before in reversed(patched):
            if before is MISSING:
                object.__delattr__(optimizer, method)
            else:
                object.__setattr__(optimizer, method, before)


def _mean(target) -> float:
    import numpy as np

    try:
        return float(np.mean([np.mean(np.asarray(t, dtype=np.float32)) for t in flatten(target, [])]))
    except Exception:
        return float("nan")
