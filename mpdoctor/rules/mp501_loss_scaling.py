"""MP501 no-loss-scaling and MP502 loss-scaling-misuse: custom training loops under mixed_float16."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from mpdoctor.diagnostics import Confidence, Diagnostic
from mpdoctor.registry import define_rule, static_check
from mpdoctor.static.backend_step_fix import step_fix
from mpdoctor.static.backend_steps import BackendStep, StepFinding, StepProblem, backend_steps, judge_step
from mpdoctor.static.context import StaticContext
from mpdoctor.static.gradient_flow import refusal
from mpdoctor.static.loss_scaling import LoopFinding, Problem, judge_loop
from mpdoctor.static.training_loop import (
    LOSS_SCALED_FLOAT16,
    TrainingLoop,
    needs_loss_scaling,
    scaled_by_hand,
    training_loops,
)

define_rule(
    "MP501",
    "no-loss-scaling",
    "error",
    "ST",
    True,
    summary="A custom training loop (GradientTape + apply_gradients) under mixed_float16 without loss scaling.",
    what="""
        A custom training loop: a function (or module-level loop) that records a `tf.GradientTape()`, takes
        `tape.gradient(loss, variables)` and feeds those gradients to `optimizer.apply_gradients(...)` /
        `optimizer.apply(...)`, while the `mixed_float16` (or pure `float16`) policy is in force, with no loss
        scaling:
        - tf_keras (Keras 2): the loss is not passed through `LossScaleOptimizer.get_scaled_loss` and the
          gradients not through `get_unscaled_gradients` (tf_keras `apply_gradients` never unscales by itself);
        - Keras 3: the optimizer is not a `LossScaleOptimizer`, or nothing calls `optimizer.scale_loss(loss)`
          (Keras 3 `apply` unscales by itself; `scale_loss` of a plain optimizer does nothing).
        Reported at the `tape.gradient(...)` call. Not raised for `model.fit` (compile wraps the optimizer in a
        LossScaleOptimizer and scales for you), `optimizer.minimize(loss, vars, tape=tape)`, `mixed_bfloat16` /
        `bfloat16` (bfloat16 has float32's exponent range: no loss scaling needed), or a loop that multiplies
        the loss by a scale itself. The static pass follows the gradients within one function (by name, through
        loop variables and the variables or lists they are accumulated into: `acc.assign_add(g)` in a gradient
        accumulation loop) and reads the policy set in the file; a loop split across functions, or a policy set
        elsewhere, is not seen (use `--assume-policy mixed_float16`).
        Keras 3 on JAX and PyTorch (the step written for the backend, each case run for real): `jax.grad` /
        `jax.value_and_grad` of a loss function the file defines, whose gradients a Keras optimizer's
        `stateless_apply` / `apply` takes, and `loss.backward()` followed by the optimizer's `apply`; float16 also
        when the PyTorch loss is computed under `torch.autocast(dtype=torch.float16)` (its matmuls then run in
        float16 whatever the Keras policy). A loss scaled by hand or by torch's `GradScaler` is left alone; an
        optax or `torch.optim` step is not a Keras optimizer's and not judged.
        """,
    why="""
        Under float16 compute the backward pass runs in float16, whose smallest subnormal is 5.96e-8: small
        gradients flush to zero and the model silently stops learning (or learns worse). Loss scaling multiplies
        the loss by a large factor (2**15 at the start, adjusted dynamically) so gradients stay representable,
        then divides them again in float32 before the update.
        """,
    bad="""
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(10)])
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        optimizer = keras.optimizers.Adam()

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)   # float16 gradients underflow
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """,
    good="""
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(10)])
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())

        # tf_keras instead: optimizer.get_scaled_loss(loss), then optimizer.get_unscaled_gradients(grads)
        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
                scaled_loss = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))   # divides by the loss scale
        """,
    fix="""
        When the loss is a name assigned inside the `with GradientTape()` block, the optimizer is constructed in
        the file (or is the compiled `self.optimizer`) and, for tf_keras, the variables are a list or
        `trainable_variables`: wraps the optimizer constructor in `LossScaleOptimizer(...)`, adds
        `scaled_loss = optimizer.scale_loss(loss)` (Keras 3) / `optimizer.get_scaled_loss(loss)` (tf_keras) at
        the end of the tape block, differentiates `scaled_loss`, and for tf_keras wraps the gradients in
        `optimizer.get_unscaled_gradients(...)`. Marked unsafe: it changes the optimizer object other code may
        share. Otherwise no autofix. Never when the gradients meet something on their way to the
        LossScaleOptimizer's `apply_gradients` that must not see them scaled (clipping, accumulation, an
        all-reduce, manual averaging, another function, the inner optimizer `.inner_optimizer` / `._optimizer`, a
        tape wrapper other than Horovod's `DistributedGradientTape`): the finding then says "not fixed
        automatically" and why; unscale the gradients before that point yourself (tf_keras:
        `get_unscaled_gradients`; Keras 3: clip with the inner optimizer's `clipnorm` / `global_clipnorm` /
        `clipvalue`, which it applies after the LossScaleOptimizer has unscaled). One exception, Keras 3: a single
        statement of the step that clips the gradients as they come from the tape, exactly as an optimizer
        argument does (`grads, _ = tf.clip_by_global_norm(grads, 1.0)`, `[tf.clip_by_value(g, -c, c) for g in
        grads]`, `[tf.clip_by_norm(g, c) for g in grads]`, c a positive literal), when the fix wraps a plain
        optimizer constructed in the file without clipping or accumulation arguments: the fix deletes the
        statement and passes `global_clipnorm` / `clipvalue` / `clipnorm` to the wrapped optimizer. (Dividing by
        the scale before the LossScaleOptimizer's `apply_gradients` would unscale twice, and applying through the
        inner optimizer would skip its overflow check: mpdoctor writes neither.) With the trace pass the fix is
        written only when one training step of the fixed file moves the weights like the float32 step.
        """,
)

define_rule(
    "MP502",
    "loss-scaling-misuse",
    "error",
    "S",
    True,
    summary="Loss scaling half done: scaled loss without unscaled gradients, or Keras 3 LossScaleOptimizer "
    "without scale_loss.",
    what="""
        Loss scaling that is wired up wrong in a GradientTape training loop:
        - tf_keras: `get_scaled_loss` without `get_unscaled_gradients` in the same function (or the reverse);
          a scaled loss is computed but `tape.gradient` differentiates the unscaled one;
        - Keras 3: a `LossScaleOptimizer` (explicit, or the one `compile()` creates under `mixed_float16` for
          `self.optimizer` in a `train_step`) applies gradients of a loss that never went through
          `optimizer.scale_loss(...)`; or `scale_loss` is called but its result is not what is differentiated;
        - either: the loss is scaled after the `with GradientTape()` block, where the tape no longer records.
        The tf_keras methods `get_scaled_loss` / `get_unscaled_gradients` called under Keras 3 (where they do not
        exist) are MP103, not this rule.
        Keras 3 on JAX and PyTorch: a LossScaleOptimizer (or compile's, for `self.optimizer` in a `train_step`
        override) whose `stateless_apply` / `apply` takes gradients of a loss never passed through `scale_loss`;
        and, with `stateless_apply`, where the loss scale lives in the optimizer variables the step is given and
        returns: the returned optimizer variables dropped (`new_vars, _ = optimizer.stateless_apply(...)`), or
        `scale_loss` called outside `with keras.StatelessScope(state_mapping=list(zip(optimizer.variables,
        optimizer_variables)))`: it then reads the optimizer's own loss-scale variable, which `stateless_apply`
        never updates. Either way the scale never halves after an overflow and every step is skipped from the
        first overflow on. The second is reported for a LossScaleOptimizer the file constructs, unless the file
        writes variables back with `.assign` (compile()'s, in a `train_step` override, makes fit's traced step
        raise instead). Keras 3 has no `stateless_scale_loss`: its own JAX trainer scales under that
        StatelessScope.
        """,
    why="""
        Gradients end up off by the loss scale (2**15 = 32768 at the start): unscaled gradients divided again make
        updates ~32768 times too small (the model barely moves), scaled gradients never divided make them 32768
        times too large (or inf, and dynamic loss scaling then skips every step). A loss scaled outside the tape
        has no recorded path to the variables: `tape.gradient` returns None and `apply_gradients` raises
        "No gradients provided for any variable".
        """,
    bad="""
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(10)])
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))   # never multiplied by the loss scale
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))   # but divided by it here
        """,
    good="""
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(10)])
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())

        # tf_keras instead: optimizer.get_scaled_loss(loss), then optimizer.get_unscaled_gradients(grads)
        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
                scaled_loss = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))   # divides by the loss scale
        """,
    fix="""
        Mechanical cases only: differentiate the scaled loss instead of the unscaled one; add the missing
        `scale_loss` line at the end of the tape block (Keras 3); wrap `tape.gradient(...)` in
        `get_unscaled_gradients(...)` (tf_keras, when the variables are a list or `trainable_variables`).
        A loss scaled outside the tape, or unscaled gradients of a loss that was never scaled, get no autofix;
        nor do gradients that meet something other than the LossScaleOptimizer's apply while scaled (see MP501).
        """,
)


@static_check("MP501", "MP502", requires=r"GradientTape")
def check_loss_scaling(ctx: StaticContext) -> Iterable[Diagnostic]:
    """The loops' findings (mpdoctor.static.loss_scaling judges them), worded; then tf_keras unscaling calls
    without a scaled loss."""
    loops = training_loops(ctx)
    found = [_diagnostic(ctx, finding) for loop in loops if (finding := judge_loop(ctx, loop)) is not None]
    if not ctx.is_keras3:
        found += _unpaired_tf_keras_calls(ctx, loops)
    return _dedupe(found)


@static_check("MP501", "MP502", requires=(r"keras", r"value_and_grad|\bgrad\(|\.backward\("))
def check_backend_steps(ctx: StaticContext) -> Iterable[Diagnostic]:
    """Keras 3 training steps written for JAX (`jax.grad` / `jax.value_and_grad`) and PyTorch (`loss.backward()`),
    judged by mpdoctor.static.backend_steps and worded in the backend's own API."""
    for step in backend_steps(ctx):
        finding = judge_step(ctx, step)
        if finding is not None:
            code, message, confidence = _step_wording(ctx, finding)
            fix, why_not = step_fix(ctx, finding)
            if fix is None:
                message = f"{message}; not fixed automatically: {why_not}"
            yield ctx.diagnostic(code, finding.at, message, confidence=confidence, fix=fix)


def _step_wording(ctx: StaticContext, finding: StepFinding) -> tuple[str, str, Confidence]:
    step, problem = finding.step, finding.problem
    opt = step.optimizer_text
    what = "custom JAX training step" if step.backend == "jax" else "PyTorch training step"
    grads = f"gradients of `{step.loss_text}`"
    policies = ctx.policies_at(step.at)
    # A float16 torch.autocast around the loss is certain; a float16 policy as certain as the policies in force.
    by_policy = _policy_confidence(policies) if needs_loss_scaling(policies) else Confidence.HIGH
    if problem is StepProblem.VARIABLES_DROPPED:
        return (
            "MP502",
            f"the optimizer variables {opt}.stateless_apply() returns are dropped, and the LossScaleOptimizer's loss "
            "scale is one of them: it never halves after an overflow, so once the gradients overflow every step is "
            "skipped; pass the returned optimizer variables to the next step",
            Confidence.HIGH,
        )
    if problem is StepProblem.STALE_SCALE:
        return (
            "MP502",
            f"{opt}.scale_loss() here reads the LossScaleOptimizer's own loss-scale variable, which "
            f"{opt}.stateless_apply() never updates: the scale never halves after an overflow, so once the gradients "
            "overflow every step is skipped; scale under `with keras.StatelessScope(state_mapping=list(zip("
            f"{opt}.variables, optimizer_variables))):` with the optimizer variables the step is given",
            Confidence.MEDIUM,
        )
    if problem is StepProblem.NEVER_SCALED:
        lso = step.optimizer.kind == "lso"
        origin = "a LossScaleOptimizer" if lso else "the LossScaleOptimizer compile() creates under mixed_float16"
        return (
            "MP502",
            f"{opt} is {origin}, whose {step.apply.func.attr}() divides the gradients by the loss scale, but "  # type: ignore[attr-defined]
            f"the {grads} were never scaled by {opt}.scale_loss(): updates are ~32768 times too small (and small "
            f"float16 gradients still flush to zero); {_step_advice(step)}",
            Confidence.HIGH if lso else Confidence.MEDIUM,
        )
    if problem is StepProblem.PLAIN_OPTIMIZER:
        return (
            "MP501",
            f"{opt} is a plain optimizer, so scale_loss() returns the loss unchanged and the float16 {grads} "
            "can underflow to zero; wrap it in keras.mixed_precision.LossScaleOptimizer",
            by_policy,
        )
    return (
        "MP501",
        f"{what} {_float16_cause(ctx, step)} without loss scaling: float16 {grads} can underflow to zero"
        f"{ctx.target.note()}; wrap the optimizer in keras.mixed_precision.LossScaleOptimizer and "
        f"{_step_advice(step)}",
        by_policy,
    )


def _float16_cause(ctx: StaticContext, step: BackendStep) -> str:
    policies = ctx.policies_at(step.at)
    if "mixed_float16" in policies:
        return "under mixed_float16"
    if "float16" in policies:
        return "under float16"
    return "under a float16 torch.autocast"


def _step_advice(step: BackendStep) -> str:
    opt = step.optimizer_text
    if step.backend == "torch":
        return f"call {opt}.scale_loss({step.loss_text}).backward(); {opt}.apply() divides the gradients by the scale"
    return (
        f"return {opt}.scale_loss(loss) from `{step.loss_text}`, under `with keras.StatelessScope(state_mapping="
        f"list(zip({opt}.variables, optimizer_variables))):` with the optimizer variables passed in and threaded "
        f"through {opt}.stateless_apply(), which divides the gradients by the scale"
    )


def _diagnostic(ctx: StaticContext, finding: LoopFinding) -> Diagnostic:
    loop = finding.loop
    code, message, confidence = _wording(ctx, finding)
    diagnostic = ctx.diagnostic(code, finding.at, message, confidence=confidence, fix=finding.fix.fix)
    reason = refusal(finding.fix.refused_by, ctx.segment(loop.optimizer), code)
    if reason is None and finding.fix.fix is None:
        reason = f"not fixed automatically: {_why_no_fix(ctx, finding)}"
    return diagnostic if reason is None else replace(diagnostic, message=f"{message}; {reason}")


def _why_no_fix(ctx: StaticContext, finding: LoopFinding) -> str:
    """Why a loop's finding has no rewrite when nothing refused one (issue 30: every refusal says why)."""
    if finding.problem is Problem.SCALED_AFTER_TAPE:
        return "where the line belongs in the tape block is yours to choose"
    if not ctx.target.keras_certain:
        return f"the target ({ctx.target.summary()}) includes both Keras lines, whose loss-scaling APIs differ"
    if finding.optimizer.kind == "unknown":
        return f"{ctx.segment(finding.loop.optimizer)} is not constructed where this file shows how"
    if finding.optimizer.kind == "compiled" and finding.problem is Problem.NO_LOSS_SCALING:
        return "compile() wraps the optimizer only under mixed_float16, not under this policy"
    return "the loop is not in a shape the rewrite handles (the loss assigned in the tape block, one-line names)"


def _wording(ctx: StaticContext, finding: LoopFinding) -> tuple[str, str, Confidence]:
    """(code, message, confidence) of a loop's finding."""
    loop, problem = finding.loop, finding.problem
    opt_text = ctx.segment(loop.optimizer)
    by_policy = _policy_confidence(ctx.policies_at(loop.gradient))
    if problem is Problem.SCALED_AFTER_TAPE:
        return (
            "MP502",
            f"the loss is scaled after the `with {loop.tape}` block, where the GradientTape no longer "
            f"records: {loop.tape}.gradient() of it returns None; move this line into the tape block",
            Confidence.HIGH,
        )
    if problem is Problem.PLAIN_OPTIMIZER:
        return (
            "MP501",
            f"{opt_text} is a plain optimizer under a float16 policy, so scale_loss() returns the loss "
            f"unchanged and float16 gradients can underflow; wrap it in "
            f"keras.mixed_precision.LossScaleOptimizer",
            by_policy,
        )
    if problem is Problem.NEVER_UNSCALED:
        return (
            "MP502",
            f"get_scaled_loss() without get_unscaled_gradients(): tf_keras {loop.apply.func.attr}() does not "  # type: ignore[attr-defined]
            f"unscale, so the gradients applied by {opt_text} are ~32768 times too large (inf, and every step is "
            "skipped)",
            Confidence.HIGH,
        )
    if problem is Problem.DIFFERENTIATES_UNSCALED:
        target, name = loop.target.id, finding.scaled_name  # type: ignore[union-attr]
        what = "divided by the loss scale in apply" if ctx.is_keras3 else "unscaled by get_unscaled_gradients"
        return (
            "MP502",
            f"{loop.tape}.gradient() differentiates the unscaled `{target}` although `{name}` holds "
            f"the scaled loss: the gradients are then {what} and updates are ~32768 times too small",
            Confidence.HIGH,
        )
    if problem is Problem.NEVER_SCALED:
        lso = finding.optimizer.kind == "lso"
        origin = "a LossScaleOptimizer" if lso else "the LossScaleOptimizer compile() creates under mixed_float16"
        return (
            "MP502",
            f"{opt_text} is {origin}, whose {loop.apply.func.attr}() "  # type: ignore[attr-defined]
            "divides the gradients by the loss scale, "
            f"but the loss was never passed through {opt_text}.scale_loss(): "
            "updates are ~32768 times too small",
            Confidence.HIGH if lso else Confidence.MEDIUM,
        )
    return "MP501", _no_scaling_message(ctx, loop, opt_text), by_policy


def _no_scaling_message(ctx: StaticContext, loop: TrainingLoop, opt_text: str) -> str:
    policy = "mixed_float16" if "mixed_float16" in ctx.policies_at(loop.gradient) else "float16"
    if ctx.is_keras3:
        advice = (
            "wrap the optimizer in keras.mixed_precision.LossScaleOptimizer and differentiate "
            f"{opt_text}.scale_loss(loss)"
        )
    else:
        advice = (
            "use a LossScaleOptimizer with get_scaled_loss() inside the tape and "
            "get_unscaled_gradients() on the gradients (tf_keras apply_gradients does not unscale)"
        )
    return (
        f"custom training loop under {policy} without loss scaling: "
        f"float16 gradients of `{ctx.segment(loop.target)}` "  # type: ignore[arg-type]
        f"can underflow to zero{ctx.target.note()}; {advice}"
    )


def _policy_confidence(policies: frozenset) -> Confidence:
    hits = {p for p in policies if p in LOSS_SCALED_FLOAT16}
    return Confidence.HIGH if not hits or hits == set(policies) else Confidence.MEDIUM


def _unpaired_tf_keras_calls(ctx: StaticContext, loops: list[TrainingLoop]) -> list[Diagnostic]:
    """tf_keras get_unscaled_gradients without get_scaled_loss in a training loop's function."""
    found = []
    for loop in loops:
        scaled = [c for c in loop.scale_calls if c.func.attr == "get_scaled_loss"]  # type: ignore[attr-defined]
        if loop.unscale_calls and not scaled and not scaled_by_hand(ctx, loop.target, loop.gradient):
            for call in loop.unscale_calls:
                found.append(
                    ctx.diagnostic(
                        "MP502",
                        call,
                        "get_unscaled_gradients() without get_scaled_loss(): the gradients of an unscaled loss are "
                        "divided by the loss scale, so updates are ~32768 times too small; differentiate "
                        "optimizer.get_scaled_loss(loss) computed inside the tape; not fixed automatically: which "
                        "loss to scale is yours to choose",
                    )
                )
    return found


def _dedupe(found: list[Diagnostic]) -> list[Diagnostic]:
    seen = set()
    result = []
    for d in found:
        key = (d.code, d.location.line, d.location.column)
        if key not in seen:
            seen.add(key)
            result.append(d)
    return result
