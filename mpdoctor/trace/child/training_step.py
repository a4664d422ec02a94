"""The training step MP504 and `mpdoctor plan` judge gradients on (issue 30): the step the user's `fit` or loop runs,
not an inference pass.

- Training mode (`training=True`): BatchNorm normalises with the batch's statistics, as in `fit`. In inference mode
  an untrained network normalises with its initial moving averages and its gradients are ~1e-12 smaller than in
  training, so they "flush" where real training never sees them.
- Labels that give a real loss, drawn with a fixed seed from the model's own float32 predictions: class ids or
  one-hot rows for a classification loss or probability outputs, 0/1 for a binary one, and for regression the
  predictions plus noise of their own spread (residuals the size of the outputs). All-zero targets make a
  crossentropy degenerate: its value is 0 while the fused float32 softmax gradient is not, so every float16
  gradient looked flushed.
- Random layers (dropout, noise) draw in their input's dtype, so float16 and float32 would drop different units
  from the same seed: the float32 step is run twice, with another global seed and the layers' own seed states moved
  on by the first run, and the innermost layers whose outputs change while their inputs do not run in inference
  mode in both steps (said in the record). If the step still differs between
  seeds, nothing is compared.
- The optimizer's loss scaling: none, or a LossScaleOptimizer's scale. A dynamic one skips a step whose scaled
  gradients overflow and halves its scale (a first-step overflow is normal under `fit`): the step is repeated at
  the halved scale until its gradients are finite, and judged there, as training would after the scale settles.
- The float32 reference from the same weights, seed and labels, with the loss scale at 1. No update is applied; the
  model's non-trainable variables (batch statistics, seed states) are restored after every run.
- The step is the model and its loss, or the user's own step (`user`, user_step.py: called as the script calls it,
  its `tape.gradient` recorded, its optimizers' scale set to the scale judged); the same runs, seeds and random
  layers apply to both, over every model the step runs.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from mpdoctor.facts.dtypes import LOW_PRECISION, dtype_name
from mpdoctor.facts.keras_semantics import layer_compute_dtype, sublayers
from mpdoctor.trace.child import backends, numerics
from mpdoctor.trace.child.keras_adapter import restore_layer_policy, set_layer_policy
from mpdoctor.trace.child.layer_api import flatten
from mpdoctor.trace.child.probe import MISSING, restore_calls

SEED = numerics.SEED
OTHER_SEED = SEED + 1
MAX_RANDOM_ROUNDS = 32  # random layers found one after another (each hides those after it from the seed)
MAX_HALVINGS = 16  # a dynamic scale of 2**15 halved this often is 0.5: below that loss scaling cannot help
CLASSIFICATION_LOSSES = ("crossentropy", "hinge", "kl_divergence", "kldivergence", "poisson")


@dataclass
class Training:
    """How the file trains a model: its loss (labels, predictions -> loss), where it comes from, its optimizer."""

    loss: Callable
    loss_name: str
    optimizer: object
    optimizer_name: str
    loss_hint: str = ""  # the loss's own name, lower case: which labels it wants


@dataclass
class StepResult:
    """One step's loss (under the configuration it ran in) and its gradients, unscaled, as float32 numpy arrays."""

    loss_value: float | None  # None: not known (a JAX or PyTorch step's gradients taken at its optimizer)
    gradients: list
    scale: float = 1.0
    skipped_steps: int = 0  # steps a dynamic loss scale skipped (overflow) before this one
    variables: list | None = None  # the variable of each gradient (the user's step); None: TrainingStep.variables


@dataclass
class TrainingStep:
    """The training step of one model on one sample batch; `problem` says why it cannot be run."""

    model: object
    sample: object
    training: Training
    labels: object = None
    labels_made: str = ""
    # The user's own step (user_step.UserStep: its `run(scale)` calls the step and records what `tape.gradient`
    # returns) instead of the model and the loss; it also runs the other models the step reads.
    user: Any = None
    inference_layers: list[str] = field(default_factory=list)  # random layers run in inference mode
    problem: str | None = None
    loss_error: str = ""  # how the loss raised last
    _reference: StepResult | None = None
    _forced: list = field(default_factory=list)

    @property
    def variables(self) -> list:
        return list(self.model.trainable_variables)  # type: ignore[attr-defined]

    @property
    def random_layers(self) -> list:
        """The layers found drawing random numbers, run in inference mode (after `reference()`)."""
        return list(self._forced)

    @property
    def models(self) -> list:
        """The models the step runs: the user's step may run several (a GAN's generator and discriminator)."""
        return list(self.user.models) if self.user is not None else [self.model]

    def reference(self) -> StepResult | None:
        """The float32 step at scale 1 (computed once)."""
        if self._reference is None and self.problem is None:
            try:
                self._reference = self._make_reference()
            except Exception as exc:
                self.problem = f"the float32 training step raised {type(exc).__name__}: {numerics.first_line(exc)}"
        return self._reference

    def low(self, scale: float, dynamic: bool) -> StepResult | None:
        """The step under the model's current policies at `scale`, halved while a dynamic scale overflows."""
        if self.reference() is None:
            return None
        skipped = 0
        while True:
            result = self._run(scale)
            if result is None:
                user_problem = getattr(self.user, "problem", None)
                self.problem = user_problem or self._loss_problem()
                return None
            if not dynamic or _all_finite(result.gradients):
                result.scale, result.skipped_steps = scale, skipped
                return result
            if skipped >= MAX_HALVINGS:
                # Overflow at every scale is not underflow; on a batch this small (BatchNorm over a few values)
                # it is not what training sees either: nothing is judged.
                self.problem = (
                    f"the dynamic loss scale did not settle: the scaled gradients overflow float16 down to scale "
                    f"{scale:g} on the sample batch, so flushing is not judged"
                )
                return None
            scale /= 2
            skipped += 1

    # ------------------------------------------------------------------------------------------ the runs

    def _make_reference(self) -> StepResult | None:
        with computing_in_float32(*self.models), _restored(*self.models):
            inputs_a: dict = {}
            first = self._first_run(inputs_a)
            if first is None:
                return None
            for _ in range(MAX_RANDOM_ROUNDS):
                inputs_b: dict = {}
                second = self._run(1.0, seed=OTHER_SEED, digests=inputs_b)
                if second is None or _same(first, second):
                    return first
                # A random layer after another one sees changed inputs: found once those before it are fixed.
                drawing = _random_layers(self.models, inputs_a, inputs_b)
                found = [layer for layer in drawing if layer not in self._forced]
                if not found:
                    break
                self._forced += found
                self.inference_layers += [str(getattr(layer, "name", type(layer).__name__)) for layer in found]
                inputs_a = {}
                first = self._run(1.0, digests=inputs_a, advance=True)
                if first is None:
                    break
            self.problem = (
                "the float32 training step changes with the random seed (random numbers drawn outside a layer "
                "mpdoctor can run in inference mode), so float16 and float32 cannot be compared value by value"
            )
            return None

    def _first_run(self, digests: dict) -> StepResult | None:
        """The first float32 step at scale 1, its random draws recorded in `digests`: the user's step with the
        arguments it accepts, or the model and loss with labels of the form the loss accepts."""
        numerics.seed_random(SEED)
        if self.user is not None:
            first = self._run(1.0, digests=digests, advance=True)
            if first is None:
                self.problem = self.user.problem or "the training step could not be run"
            self.labels_made = self.user.labels_made
            return first
        predictions = self.model(self.sample, training=False)  # type: ignore[operator]
        for sparse in (False, True):
            self.labels = training_labels(predictions, sparse, self.training.loss_hint)
            digests.clear()
            first = self._run(1.0, digests=digests, advance=True)
            if first is not None:
                self.labels_made = _describe(self.labels)
                return first
        self.problem = self._loss_problem() + " with labels shaped for it"
        return None

    def _loss_problem(self) -> str:
        cause = f" ({self.loss_error})" if self.loss_error else ""
        return f"the loss could not be computed on the sample batch{cause}"

    def _run(
        self, scale: float, seed: int = SEED, digests: dict | None = None, advance: bool = False
    ) -> StepResult | None:
        """One step from the current weights; None when the loss raises. The model's state is restored afterwards
        unless `advance` (Keras 3 layers draw from their own seed state, which only a step's draw moves on)."""
        calls: list = []  # (layer id, how many of its tensors are inputs) of each layer call, when digesting
        tensors: list = []  # the float tensors of each such call: concrete once the step has run
        patched = [(layer, _inference_call) for layer in self._forced]
        if digests is not None:
            patched += [
                (layer, _recording(calls, tensors, id(layer))) for model in self.models for layer in _layers(model)
            ]
        with contextlib.nullcontext() if advance else _restored(*self.models), _wrapped(patched):
            numerics.seed_random(seed)
            result = self.user.run(scale) if self.user is not None else self._model_step(scale, tensors)
        if digests is not None and result is not None:  # a failed step's tensors may be tracers still
            for (key, inputs), values in zip(calls, tensors, strict=True):
                digests.setdefault(key, []).append((_digest(values[:inputs]), _digest(values[inputs:])))
        return result

    def _model_step(self, scale: float, kept: list) -> StepResult | None:
        """The model and the file's loss, differentiated by the backend's gradient API (None when it raises: the
        loss may not take labels of this form)."""
        import numpy as np

        def scaled_loss():
            predictions = self.model(self.sample, training=True)  # type: ignore[operator]
            return backends.mean_float32(self.training.loss(self.labels, predictions)) * scale

        model_state = [v for model in self.models for v in model.non_trainable_variables]
        try:
            scaled, grads = backends.loss_and_gradients(scaled_loss, self.variables, model_state, kept)
        except Exception as exc:
            self.loss_error = f"{type(exc).__name__}: {numerics.first_line(exc)}"
            return None
        return StepResult(scaled / scale, [None if g is None else g / np.float32(scale) for g in grads], scale)


# ---------------------------------------------------------------------------------------------- labels


def training_labels(predictions, sparse: bool, loss_hint: str = "", seed: int = SEED):
    """Labels for these predictions that give the loss a real value (see the module docstring): class ids
    (`sparse`) or arrays shaped like the predictions."""
    import numpy as np

    rng = np.random.default_rng(seed)
    made = []
    for prediction in (p for p in flatten(predictions, []) if hasattr(p, "shape")):
        values = backends.to_float32(prediction)
        classes = int(values.shape[-1]) if values.ndim else 1
        if sparse:
            made.append(rng.integers(0, max(classes, 1), size=values.shape[:-1]).astype(np.int32))
            continue
        kind = _label_kind(values, loss_hint)
        if kind == "one-hot":
            ids = rng.integers(0, classes, size=values.shape[:-1])
            made.append(np.eye(classes, dtype=np.float32)[ids])
        elif kind == "binary":
            made.append(rng.integers(0, 2, size=values.shape).astype(np.float32))
        else:
            spread = float(np.std(values)) or float(np.max(np.abs(values), initial=0.0)) or 1.0
            made.append(values + rng.standard_normal(values.shape).astype(np.float32) * np.float32(spread))
    made = [backends.constant(label) for label in made]
    return made[0] if len(made) == 1 else made


def _label_kind(values, loss_hint: str) -> str:
    """ "one-hot", "binary" or "regression" labels for one output."""
    import numpy as np

    probabilities = bool(values.size) and bool(np.all((values >= 0) & (values <= 1)))
    sums_to_one = probabilities and values.ndim >= 1 and bool(np.allclose(values.sum(axis=-1), 1.0, atol=1e-2))
    if "binary" in loss_hint:
        return "binary"
    if any(name in loss_hint for name in CLASSIFICATION_LOSSES) and values.ndim and values.shape[-1] > 1:
        return "one-hot"
    if sums_to_one and values.shape[-1] > 1:
        return "one-hot"
    return "binary" if probabilities and "mean" not in loss_hint else "regression"


def _describe(labels) -> str:
    parts = []
    for label in flatten(labels, []):
        parts.append("class ids" if _dtype_name(label).startswith("int") else "seeded targets")
    return ", ".join(dict.fromkeys(parts))


# ---------------------------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def computing_in_float32(*models) -> Iterator[None]:
    """Every layer of the models that computes in float16/bfloat16 computes in float32 inside the block (the
    variables are shared: `mixed_*` variables are float32)."""
    undo = [
        set_layer_policy(layer, "float32")
        for model in models
        for layer in sublayers(model, recursive=True, include_self=True)
        if layer_compute_dtype(layer) in LOW_PRECISION
    ]
    try:
        yield
    finally:
        for entry in undo:
            restore_layer_policy(entry)


@contextlib.contextmanager
def _restored(*models) -> Iterator[None]:
    """The models' non-trainable variables (batch statistics, seed states) as they were before the block."""
    variables = [v for model in models for v in model.non_trainable_variables]
    state = [v.numpy() for v in variables]
    try:
        yield
    finally:
        for variable, value in zip(variables, state, strict=True):
            variable.assign(value)


@contextlib.contextmanager
def _wrapped(patches: list) -> Iterator[None]:
    """Instance-level `call` wrappers (layer, make(bound call) -> call) for the block."""
    patched = []
    try:
        for layer, make in patches:
            patched.append((layer, layer.__dict__.get("call", MISSING)))
            object.__setattr__(layer, "call", make(layer.call))
        yield
    finally:
        restore_calls(list(reversed(patched)))


def inference_mode(layers: list):
    """The layers run in inference mode inside the block (`training=False` passed to their call)."""
    return _wrapped([(layer, _inference_call) for layer in layers])


def _inference_call(bound):
    def call(*args, **kwargs):
        if "training" in kwargs:
            kwargs["training"] = False
        return bound(*args, **kwargs)

    return call


def _recording(calls: list, tensors: list, key: int):
    """A `call` wrapper keeping each call's float input and output tensors (digested after the step: inside
    `jax.value_and_grad` they are tracers until it returns)."""

    def make(bound):
        def call(*args, **kwargs):
            outputs = bound(*args, **kwargs)
            inputs = _float_tensors((args, kwargs))
            calls.append((key, len(inputs)))
            tensors.append(inputs + _float_tensors(outputs))
            return outputs

        return call

    return make


def _float_tensors(structure) -> list:
    return [
        value
        for value in flatten(structure, [])
        if hasattr(value, "shape") and _dtype_name(value).startswith(("float", "bfloat"))
    ]


def _dtype_name(value) -> str:
    return dtype_name(getattr(value, "dtype", None)) or ""


def _digest(values: list) -> str:
    """A fingerprint of the values; "" when one is not concrete (a tracer of the user's own `jax.grad`): such a
    layer is not found drawing random numbers."""
    import numpy as np

    digest = hashlib.blake2b(digest_size=16)
    for value in values:
        try:
            digest.update(np.ascontiguousarray(backends.to_float32(value)).tobytes())
        except Exception:
            return ""
    return digest.hexdigest()


def _layers(model) -> list:
    return [layer for layer in sublayers(model, recursive=True) if layer is not model]


def _random_layers(models: list, first: dict, second: dict) -> list:
    """The innermost layers whose outputs changed with the seed while their inputs did not."""
    drawing = []
    for layer in (layer for model in models for layer in _layers(model)):
        a, b = first.get(id(layer), []), second.get(id(layer), [])
        if len(a) == len(b) and any(x[0] == y[0] and x[1] != y[1] for x, y in zip(a, b, strict=True)):
            drawing.append(layer)
    inner = []
    for layer in drawing:
        own = {id(sub) for sub in sublayers(layer, recursive=True)}
        if not any(id(other) in own for other in drawing if other is not layer):
            inner.append(layer)
    return inner


def _same(a: StepResult, b: StepResult) -> bool:
    return all(
        (x is None) == (y is None) and (x is None or x.tobytes() == y.tobytes())
        for x, y in zip(a.gradients, b.gradients, strict=True)
    )


def _all_finite(gradients: list) -> bool:
    import numpy as np

    return all(g is None or bool(np.isfinite(g).all()) for g in gradients)


# ---------------------------------------------------------------------------------------------- the optimizer


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


def dynamic_scaling(optimizer) -> bool:
    """Whether the optimizer's loss scale is dynamic (halved on overflow): Keras 3's always is; tf_keras's unless
    `dynamic=False`."""
    return loss_scaling(optimizer)[0] != "none" and bool(getattr(optimizer, "dynamic", True))


def unique(variables: list) -> list:
    seen, kept = set(), []
    for variable in variables:
        if id(variable) not in seen:
            seen.add(id(variable))
            kept.append(variable)
    return kept


def optimizer_variables(optimizer) -> list:
    """The optimizer's variables, its loss scale included (tf_keras keeps it out of `variables()`)."""
    variables = getattr(optimizer, "variables", None)
    if callable(variables):  # tf_keras' OptimizerV2 spells it as a method
        variables = variables()
    scale = _scale_variable(optimizer)
    return unique([*(variables or []), *([scale] if scale is not None else [])])


def set_scale(optimizer, value: float) -> bool:
    """Set a LossScaleOptimizer's current scale (False when it has one that cannot be set); True otherwise."""
    if loss_scaling(optimizer)[0] == "none":
        return True
    variable = _scale_variable(optimizer)
    if variable is None:
        return False
    variable.assign(value)
    return True


def _scale_variable(optimizer):
    """A LossScaleOptimizer's current scale as a variable (None without one)."""
    if loss_scaling(optimizer)[0] == "none":
        return None
    # Keras 3: dynamic_scale (a variable once built); tf_keras: the dynamic state's current scale.
    for holder, attribute in (
        (optimizer, "dynamic_scale"),
        (getattr(optimizer, "_loss_scale", None), "_current_loss_scale"),
    ):
        variable = getattr(holder, attribute, None) if holder is not None else None
        if variable is not None and hasattr(variable, "assign"):
            return variable
    return None


def training_of(model, module) -> Training | None:
    """How the file trains `model`: compiled (its loss and the optimizer compile() made), or a Keras loss object and
    an optimizer at module level (a custom training loop); None when neither."""
    compiled = bool(getattr(model, "compiled", False) or getattr(model, "_is_compiled", False))
    if compiled and getattr(model, "loss", None) is not None:

        def compiled_loss(y, y_pred):
            try:
                return model.compute_loss(x=None, y=y, y_pred=y_pred)
            except TypeError:  # tf_keras spells it positionally
                return model.compute_loss(None, y, y_pred)

        hint = _loss_hint(model.loss)
        return Training(compiled_loss, "the compiled loss", getattr(model, "optimizer", None), "compile()", hint)
    loss = optimizer = None
    loss_name = optimizer_name = ""
    for name, value in vars(module).items() if module is not None else ():
        classes = {c.__name__ for c in type(value).__mro__}
        if loss is None and "Loss" in classes and callable(value):
            loss, loss_name = value, f"`{name}` ({type(value).__name__})"
        if optimizer is None and ("Optimizer" in classes or "OptimizerV2" in classes):
            optimizer, optimizer_name = value, name
    if loss is None or optimizer is None:
        return None
    return Training(loss, loss_name, optimizer, optimizer_name, _loss_hint(loss))


def _loss_hint(loss) -> str:
    """The loss's names, lower case (a string, a function, a Loss object, or a list/dict of them)."""
    names = []
    for item in flatten(loss, []):
        for text in (item if isinstance(item, str) else "", getattr(item, "__name__", ""), type(item).__name__):
            names.append(str(text).lower())
        names.append(str(getattr(item, "name", "") or "").lower())
    return " ".join(n for n in names if n)
