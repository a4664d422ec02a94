"""MP102 pure-float16-policy: policy float16/bfloat16 (not mixed_*) on a model that is trained."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic, Fix, Severity
from mpdoctor.facts.keras_semantics import model_factory
from mpdoctor.facts.records import LayerRecord, PolicyEvent
from mpdoctor.registry import define_rule, static_check, trace_check
from mpdoctor.static.astutil import position
from mpdoctor.static.context import StaticContext
from mpdoctor.static.edits import policy_literal_fix, quoted_like
from mpdoctor.static.policies import POLICY_SETTERS
from mpdoctor.static.topology import is_application
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts

define_rule(
    "MP102",
    "pure-float16-policy",
    "warning",
    "ST",
    True,
    summary="Global policy `float16`/`bfloat16` (not `mixed_*`) in a script that trains: weights become low precision.",
    what="""
        The global policy is set to `float16` or `bfloat16` (`set_global_policy("float16")`,
        `set_dtype_policy`, `Policy("float16")`, `set_floatx("float16")`) in a file that trains a model
        (`.fit(`, `.fit_generator(`, `.train_on_batch(`, or `GradientTape` with `apply_gradients` /
        `optimizer.apply`). Files that only run inference are not reported, nor a policy set only after the
        training at module level. A `set_floatx` call is ignored when the file also sets a policy explicitly
        (an explicit global policy overrides floatx). The message says "no loss scaling either" only for float16
        without a `LossScaleOptimizer` in the file (compile adds none under a pure policy; bfloat16 needs none).
        Pure float16 with loss scaling and stochastic rounding on Graphcore IPUs (`tensorflow.python.ipu`,
        `floating_point_behaviour.esr`), their documented practice, is an info note.
        """,
    why="""
        Unlike `mixed_float16`, a pure `float16` policy also stores the variables in float16: updates smaller
        than about 1/1000 of a weight round away, optimizer slots and epsilons underflow, and there is no loss
        scaling. Measured: `float16` with Adam on Keras 3 stalls or goes NaN in the first epoch while the same
        script trains under `mixed_float16`.
        """,
    bad="""
        import keras
        import numpy as np

        keras.mixed_precision.set_global_policy("float16")
        model = keras.Sequential([
            keras.Input((20,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="softmax", dtype="float32"),
        ])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")

        if __name__ == "__main__":
            x_train, y_train = np.random.rand(1024, 20).astype("float32"), np.random.randint(0, 10, 1024)
            model.fit(x_train, y_train, epochs=5)
        """,
    good="""
        import keras
        import numpy as np

        keras.mixed_precision.set_global_policy("mixed_float16")   # float16 math, float32 variables
        model = keras.Sequential([
            keras.Input((20,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="softmax", dtype="float32"),
        ])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")

        if __name__ == "__main__":
            x_train, y_train = np.random.rand(1024, 20).astype("float32"), np.random.randint(0, 10, 1024)
            model.fit(x_train, y_train, epochs=5)
        """,
    fix="""
        Replaces the policy string literal (`"float16"` -> `"mixed_float16"`, `"bfloat16"` -> `"mixed_bfloat16"`),
        in the call, in an inline `Policy(...)`, or in a module constant used only there. A
        `<keras>.backend.set_floatx("float16")` / `<keras>.config.set_floatx(...)` call is replaced by
        `<keras>.mixed_precision.set_global_policy("mixed_float16")` (marked unsafe: code that reads `floatx()`
        changes too). No fix when the policy is not a literal the file spells.
        """,
)


_TRAIN_METHODS = ("fit", "fit_generator", "train_on_batch")
_PURE_TO_MIXED = {"float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}
_FLOATX_SETTERS = tuple(name for name, floatx in POLICY_SETTERS.items() if floatx)


@static_check("MP102")
def check_pure_float16_policy(ctx: StaticContext) -> Iterable[Diagnostic]:
    pure = [e for e in ctx.policy_events if e.policy in _PURE_TO_MIXED]
    if not pure:
        return
    training = _training_calls(ctx)
    if not training:
        return  # inference-only scripts may use float16 on purpose
    explicit_policy = any(not POLICY_SETTERS[ctx.call_name(e.node)] and e.policy is not None for e in ctx.policy_events)
    for event in pure:
        floatx = ctx.call_name(event.node) in _FLOATX_SETTERS
        if floatx and explicit_policy:
            continue  # an explicit global policy overrides floatx
        if event.scope is None and all(
            ctx.enclosing_function(t) is None and position(t) < position(event.node) for t in training
        ):
            continue  # the policy only applies to code after all the training
        confidence = Confidence.HIGH
        built = _all_constructions(ctx)
        if built and not any(event.policy in ctx.layer_policies(lc) for lc in built):
            continue  # every layer here is built under another policy (or its own dtype)
        if not built:
            confidence = Confidence.MEDIUM  # the model is built in another module
        mixed = _PURE_TO_MIXED[event.policy]  # type: ignore[index]
        what = f'floatx "{event.policy}" (the default policy)' if floatx else f'global policy "{event.policy}"'
        scaled = bool(ctx.calls_named(_LOSS_SCALE_OPTIMIZER))
        message = f"{what} in a script that trains: {pure_policy(event.policy, scaled)}"
        fix = _floatx_fix(ctx, event, mixed) if floatx else policy_literal_fix(ctx.semantic, event, mixed)
        if scaled and _stochastic_rounding(ctx):
            note = ctx.diagnostic("MP102", event.node, _ipu_note(what, event.policy), confidence=confidence)
            yield replace(note, severity=Severity.INFO)
            continue
        yield ctx.diagnostic("MP102", event.node, message, confidence=confidence, fix=fix)


_LOSS_SCALE_OPTIMIZER = "keras.mixed_precision.LossScaleOptimizer"
# Graphcore's IPU TensorFlow: stochastic rounding of float16 (`floating_point_behaviour.esr`,
# `stochastic_rounding`), with which its documentation trains in pure float16 with loss scaling.
_STOCHASTIC_ROUNDING = ("esr", "stochastic_rounding", "StochasticRoundingBehaviour")


def _stochastic_rounding(ctx: StaticContext) -> bool:
    """The file targets IPUs (imports tensorflow.python.ipu) and turns on their stochastic rounding."""
    imported = (*ctx.imports.modules, *ctx.imports.aliases.values())
    if not any(name.startswith(("tensorflow.python.ipu", "ipu_tensorflow")) for name in imported):
        return False
    return any(
        isinstance(node, (ast.Attribute, ast.Name, ast.keyword))
        and (getattr(node, "attr", None) or getattr(node, "id", None) or getattr(node, "arg", None))
        in _STOCHASTIC_ROUNDING
        for node in ctx.nodes
    )


def _ipu_note(what: str, policy: str | None) -> str:
    return (
        f"{what} with loss scaling and IPU stochastic rounding: variables are stored in {policy}, which is the "
        f"documented practice on Graphcore IPUs (stochastic rounding keeps small updates from rounding away); "
        f'elsewhere, or if training stalls, use "{_PURE_TO_MIXED.get(policy or "", "mixed_float16")}" (float32 '
        "variables)"
    )


def _all_constructions(ctx: StaticContext) -> list[LayerRecord]:
    """Layer calls plus `keras.applications` model calls."""
    found = list(ctx.layer_calls)
    for call in ctx.calls:
        # pretrained constructors and presets build their layers under the global policy (loaded models keep theirs)
        if is_application(ctx, call) or model_factory(ctx.call_name(call)) == "built":
            found.append(ctx.layer_record(call, ctx.call_name(call)))  # type: ignore[arg-type]
    return found


def _training_calls(ctx: StaticContext) -> list[ast.Call]:
    found = []
    has_tape = False
    for call in ctx.calls:
        func = call.func
        if isinstance(func, ast.Attribute):
            if func.attr in _TRAIN_METHODS and not _non_keras_receiver(ctx, func.value):
                found.append(call)
            elif func.attr == "GradientTape":
                has_tape = True
        elif isinstance(func, ast.Name) and (ctx.call_name(call) or "").endswith("GradientTape"):
            has_tape = True
    if has_tape:
        for call in ctx.calls:
            func = call.func
            if isinstance(func, ast.Attribute) and (
                func.attr == "apply_gradients"
                or (func.attr == "apply" and "opt" in (ctx.segment(func.value) or "").lower())
            ):
                found.append(call)
    return found


def _non_keras_receiver(ctx: StaticContext, receiver: ast.AST) -> bool:
    """`StandardScaler().fit(x)`, `scaler.fit(x)` with scaler from sklearn: not a Keras training call."""
    value = receiver
    if isinstance(receiver, ast.Name):
        value = ctx.last_assignment(receiver.id, receiver) or receiver
    if isinstance(value, ast.Call):
        name = ctx.call_name(value) or ""
        if name.startswith("keras.preprocessing."):  # ImageDataGenerator.fit computes feature statistics
            return True
        if model_factory(name) == "built":  # `TFBert...from_pretrained`, keras-hub `from_preset`: Keras models
            return False
        return bool(name) and not name.startswith(("keras.", "tf.", "hub."))
    return False


def _floatx_fix(ctx: StaticContext, event: PolicyEvent, mixed: str) -> Fix | None:
    """`tf.keras.backend.set_floatx("float16")` -> `tf.keras.mixed_precision.set_global_policy("mixed_float16")`."""
    func = event.node.func
    if not (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Attribute)
        and func.value.attr in ("backend", "config")
        and ctx.resolve(func.value.value) == "keras"
    ):
        return None
    arg = event.node.args[0] if len(event.node.args) == 1 and not event.node.keywords else None
    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
        return None
    new = f"{ctx.segment(func.value.value)}.mixed_precision.set_global_policy({quoted_like(ctx.semantic, arg, mixed)})"
    return Fix(f"set the {mixed!r} policy instead of floatx", (ctx.edit(event.node, new),), applicability="unsafe")


def pure_policy(policy: str, loss_scaled: bool = False) -> str:
    """MP102's fact and advice in the words of both passes, after what sets the policy. Keras scales the loss by
    itself only under mixed_float16: under float16 say so, unless the file wraps the optimizer itself (bfloat16
    needs no loss scaling)."""
    scaling = " (no loss scaling either)" if policy == "float16" and not loss_scaled else ""
    return (
        f"variables are stored in {policy} too, so small updates round to zero and the optimizer state overflows "
        f'or underflows{scaling}; use "{_PURE_TO_MIXED[policy]}" (float32 variables, {policy} compute)'
    )


@trace_check("MP102")
def trace_pure_float16_policy(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    """The run ends under a pure float16/bfloat16 policy and a compiled (to be trained) model has float16 weights."""
    policy = facts.final_policy
    if policy not in ("float16", "bfloat16"):
        return []
    compiled = [m for m in facts.models if m.compiled]
    if not compiled:
        return []
    events = [e for e in facts.policy_events if e.policy == policy]
    where = events[-1].location if events else None
    names = ", ".join(f"`{m.name}`" for m in compiled[:3])
    return [
        ctx.diagnostic(
            "MP102",
            where,
            f'policy "{policy}" is in force when {names} is compiled to be trained: {pure_policy(policy)}',
        )
    ]
