"""MP301 checkpoint-dtype-mismatch: checkpoint values restored into variables of another dtype."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic, Fix
from mpdoctor.registry import (
    ExceptionVerdict,
    define_rule,
    exception_pattern,
    static_check,
    static_verdicts,
    trace_check,
    verdict_of,
)
from mpdoctor.static.astutil import keyword_value
from mpdoctor.static.checkpoint_paths import describe_path, own_checkpoint, path_key, path_suffix, receiver_call
from mpdoctor.static.context import StaticContext
from mpdoctor.static.edits import policy_literal_fix
from mpdoctor.static.policies import POLICY_SETTERS
from mpdoctor.static.saver_builder import saver_builder_fix
from mpdoctor.static.tf1_graphs import LOW_DTYPES, float16_graphs, graph_key, resolved_value, tf1_call_name
from mpdoctor.tf_messages import capped, dtype_name
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts

define_rule(
    "MP301",
    "checkpoint-dtype-mismatch",
    "error",
    "STA",
    True,
    summary="A checkpoint value's dtype differs from the variable it restores into (float32 checkpoint, float16 "
    "variables).",
    what="""
        A checkpoint restore where the stored values and the variables they restore into have different dtypes:
        TF2 object-based `tf.train.Checkpoint`, TF1 name-based `Saver`, Keras `.h5`, `.weights.h5`, `.keras`.
        The artifact and trace passes read the checkpoint and report each variable: key, checkpoint dtype,
        variable dtype.

        The static pass cannot read the checkpoint, so it reports (confidence medium) the restores that fail
        when the checkpoint holds float32 values, the usual case:
        - TF1: `Saver(...).restore(sess, path)` in a graph that creates float16/bfloat16 variables
          (`get_variable(..., dtype=tf.float16)`, `tf.Variable(..., dtype=tf.float16)`,
          `tf.compat.v1.layers.dense` on a float16 tensor, a `variable_scope(dtype=tf.float16)`). "Same graph":
          the same function or module since the last `reset_default_graph()`, or the same
          `with tf.Graph().as_default():` block. Reported at the Saver constructor.
        - TF2: `tf.train.Checkpoint(model=model).restore(path)` / `.read(path)`, and tf_keras
          `model.load_weights(path)` of TF-format weights, while the pure `float16` / `bfloat16` policy is in
          force (the model's variables are then float16).
        Not reported: a Saver with `builder=` (a cast-on-restore builder), a restore of a checkpoint the same file
        saved from float16 variables, `mixed_float16` / `mixed_bfloat16` (variables stay float32), tf_keras
        `.h5` and Keras 3 `.weights.h5` / `.keras` files (they cast silently: MP302/MP303 audit the values).
        """,
    why="""
        Restores read each tensor with the dtype of the variable it goes into and do not cast: a float32 value for
        a float16 variable fails with "tensor_name = dense/kernel; expected dtype half does not equal original
        dtype float". Pure float16 policies and hand-written float16 TF1 graphs hit this with every pretrained
        float32 checkpoint.
        """,
    bad="""
        import keras
        import tensorflow as tf

        def build_model():
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

        tf.train.Checkpoint(model=build_model()).write("pretrained/ckpt")   # float32 values

        keras.mixed_precision.set_global_policy("float16")   # float16 variables
        model = build_model()
        tf.train.Checkpoint(model=model).read("pretrained/ckpt")   # fails: float32 values into float16 variables
        """,
    good="""
        import keras
        import tensorflow as tf

        def build_model():
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

        tf.train.Checkpoint(model=build_model()).write("pretrained/ckpt")   # float32 values

        keras.mixed_precision.set_global_policy("mixed_float16")   # float32 variables, float16 compute
        model = build_model()
        tf.train.Checkpoint(model=model).read("pretrained/ckpt")
        # or convert the checkpoint once: mpdoctor convert-checkpoint pretrained/ckpt ckpt16/ckpt --dtype float16
        """,
    fix="""
        TF1 `Saver`: `--fix` adds a `CastOnRestoreSaverBuilder` class (a `BaseSaverBuilder` whose `bulk_restore`
        reads float16/bfloat16 variables' values as float32 with `io_ops.restore_v2` and `tf.cast`s them) after
        the file's imports, once, and passes `builder=CastOnRestoreSaverBuilder()` to the Saver. Safe when the
        trace saw the restore fail on float32 values; unsafe from the static pass alone (a checkpoint that already
        holds float16 values would then fail). TF2 `Checkpoint` restores and tf_keras TF-format `load_weights`
        under a pure `float16` policy: `--fix --unsafe-fixes` switches the policy to `mixed_float16` (float32
        variables, so the float32 values restore; unsafe: the variables' dtype changes). No cast-on-restore code
        is generated for them; the alternative is converting the checkpoint once
        (`mpdoctor convert-checkpoint IN OUT --dtype float16`).
        """,
)


_SAVERS = ("tf.train.Saver", "tf.compat.v1.train.Saver")
_CHECKPOINTS = ("tf.train.Checkpoint", "tf.compat.v1.train.Checkpoint", "tf.train.CheckpointV1")
_MANAGERS = ("tf.train.CheckpointManager",)
_H5_SUFFIXES = (".h5", ".hdf5", ".keras", ".weights.h5")
# Objects whose variables are not (known to be) float16: plain variables, optimizers, data iterators, and loaded models
# (a loaded Keras model keeps the dtype policies it was saved with, whatever the global policy).
_NOT_MODELS = (
    "tf.Variable",
    "tf.constant",
    "tf.data.",
    "keras.optimizers.",
    "tf.train.",
    "tf.compat.v1.train.",
    "keras.models.load_model",
    "keras.saving.load_model",
    "tf.saved_model.",
    "hub.",
)


def _method_calls(ctx: StaticContext, *methods: str) -> list[ast.Call]:
    return [c for c in ctx.calls if isinstance(c.func, ast.Attribute) and c.func.attr in methods]


def mismatch(variable_dtype: str, checkpoint_dtype: str = "float32") -> str:
    """MP301's fact in the words of both passes."""
    tf_name = {"float16": "half", "float32": "float", "float64": "double"}
    return (
        f'the restore does not cast ("expected dtype {tf_name.get(variable_dtype, variable_dtype)} does not equal '
        f'original dtype {tf_name.get(checkpoint_dtype, checkpoint_dtype)}")'
    )


def advice(kind: str, dtype: str) -> str:
    """What to do, by the kind of restore ("saver", "checkpoint", "load_weights"), in the words of both passes."""
    convert = f"convert the checkpoint first: `mpdoctor convert-checkpoint IN OUT --dtype {dtype}`"
    if kind == "saver":
        return f"restore through a cast (a Saver `builder=` whose bulk_restore reads float32 and tf.casts) or {convert}"
    if kind == "load_weights":
        return f'use "mixed_{dtype}" (float32 variables), load an .h5 file (cast on load), or {convert}'
    return f'use "mixed_{dtype}" (float32 variables) or {convert}'


def _tf1_saver_restores(ctx: StaticContext) -> list[Diagnostic]:
    graphs = float16_graphs(ctx)
    if not graphs:
        return []
    saves = []  # (path key, save call) of Savers saving from a float16 graph
    for call in _method_calls(ctx, "save"):
        saver = receiver_call(ctx, call, _SAVERS)
        if saver is None:
            continue
        if graph_key(ctx, saver) in graphs:
            path = call.args[1] if len(call.args) > 1 else keyword_value(call, "save_path")
            saves.append((path_key(ctx, path, call), call))
    found = []
    for call in _method_calls(ctx, "restore"):
        saver = receiver_call(ctx, call, _SAVERS)
        if (
            saver is None
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Call)
            and tf1_call_name(ctx, call.func.value) in _SAVERS
        ):
            saver = call.func.value
        if saver is None:
            continue
        if keyword_value(saver, "builder") is not None:
            continue
        key = graph_key(ctx, saver)
        if key not in graphs:
            continue
        path = call.args[1] if len(call.args) > 1 else keyword_value(call, "save_path")
        if own_checkpoint(path_key(ctx, path, call), saves):
            continue
        dtype, labels = graphs[key]
        shown = ", ".join(labels[:3]) + (", ..." if len(labels) > 3 else "")
        found.append(
            ctx.diagnostic(
                "MP301",
                saver,
                f"this Saver restores {describe_path(ctx, path)} into a graph with {dtype} variables ({shown}): "
                f"{mismatch(dtype)}; {advice('saver', dtype)}",
                confidence=Confidence.MEDIUM,
                # unsafe: the source does not say the checkpoint holds float32 values (the trace can: its fix is safe)
                fix=saver_builder_fix(ctx, saver, "unsafe"),
            )
        )
    return found


def _pure_low(policies: Iterable[str | None]) -> set[str]:
    return {p for p in policies if p in LOW_DTYPES}


def _object_policies(ctx: StaticContext, obj: ast.AST, at: ast.AST) -> frozenset | None:
    """Policies in force when a checkpointed object (model, layer) was constructed; None when it is not a model."""
    value = resolved_value(ctx, obj, at)
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
        value = ctx.self_attribute(value, value.attr) or value
    if isinstance(value, ast.Call):
        name = tf1_call_name(ctx, value) or ""
        if name.startswith(_NOT_MODELS) or (isinstance(value.func, ast.Name) and value.func.id in ("iter", "dict")):
            return None
        layer = ctx.layer_call(value)
        if layer is not None:
            return ctx.layer_policies(layer)
        return ctx.policies_at(value)
    if isinstance(value, (ast.Constant, ast.Dict, ast.List)):
        return None
    return frozenset()  # unknown object: judge by the policy at the restore


def _checkpoint_policies(ctx: StaticContext, checkpoint: ast.Call, at: ast.AST) -> frozenset:
    result: set = set()
    saw_model = False
    for kw in checkpoint.keywords:
        if kw.arg is None:
            continue
        policies = _object_policies(ctx, kw.value, checkpoint)
        if policies is None:
            continue
        saw_model = True
        result |= policies or ctx.policies_at(at)
    for arg in checkpoint.args:  # tf.compat.v1.train.Checkpoint / positional root
        policies = _object_policies(ctx, arg, checkpoint)
        if policies is not None:
            saw_model = True
            result |= policies or ctx.policies_at(at)
    return frozenset(result) if saw_model else frozenset()


def _tf2_saves(ctx: StaticContext) -> list[tuple[tuple, ast.Call]]:
    """Checkpoints this file writes while a pure float16/bfloat16 policy is in force."""
    saves = []
    for call in _method_calls(ctx, "save", "write"):
        checkpoint = receiver_call(ctx, call, _CHECKPOINTS)
        manager = receiver_call(ctx, call, _MANAGERS)
        if checkpoint is not None:
            if _pure_low(_checkpoint_policies(ctx, checkpoint, call) or ctx.policies_at(call)):
                saves.append((path_key(ctx, call.args[0] if call.args else None, call), call))
        elif manager is not None and _pure_low(ctx.policies_at(call)):
            directory = manager.args[1] if len(manager.args) > 1 else keyword_value(manager, "directory")
            saves.append((("manager", ctx.segment(call.func.value)), call))  # type: ignore[attr-defined]
            saves.append((("dir", path_key(ctx, directory, manager)), call))
    for call in _method_calls(ctx, "save_weights"):
        if _pure_low(ctx.policies_at(call)):
            saves.append((path_key(ctx, call.args[0] if call.args else None, call), call))
    for call in ctx.calls_named("keras.callbacks.ModelCheckpoint"):
        if _pure_low(ctx.policies_at(call)):
            saves.append((path_key(ctx, call.args[0] if call.args else keyword_value(call, "filepath"), call), call))
    return saves


def _tf2_restores(ctx: StaticContext) -> list[Diagnostic]:
    if not any(p in LOW_DTYPES for p in (*(e.policy for e in ctx.policy_events), ctx.settings.assumed_policy)):
        return []
    saves = _tf2_saves(ctx)
    found = _checkpoint_restores(ctx, saves)
    if ctx.is_keras3:
        return found  # Keras 3 load_weights only reads .keras / .weights.h5 / .h5, which cast silently
    return found + _tf_format_weight_loads(ctx, saves)


def _checkpoint_restores(ctx: StaticContext, saves: list[tuple[tuple, ast.Call]]) -> list[Diagnostic]:
    """`tf.train.Checkpoint(...).restore/read(path)` into objects built under a pure low-precision policy."""
    found = []
    for call in _method_calls(ctx, "restore", "read"):
        checkpoint = receiver_call(ctx, call, _CHECKPOINTS)
        if (
            checkpoint is None
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Call)
            and tf1_call_name(ctx, call.func.value) in _CHECKPOINTS
        ):
            checkpoint = call.func.value
        if checkpoint is None:
            continue
        policies = _checkpoint_policies(ctx, checkpoint, call)
        low = _pure_low(policies)
        if not low:
            continue
        path = call.args[0] if call.args else keyword_value(call, "save_path")
        if own_checkpoint(path_key(ctx, path, call), saves):
            continue
        policy = sorted(low)[0]
        confidence = Confidence.MEDIUM if low == set(policies) else Confidence.LOW
        found.append(
            ctx.diagnostic(
                "MP301",
                call,
                f"tf.train.Checkpoint {call.func.attr}s {describe_path(ctx, path)} into a model built under "  # type: ignore[attr-defined]
                f'policy "{policy}", whose variables are {policy}: {mismatch(policy)}; {advice("checkpoint", policy)}',
                confidence=confidence,
                fix=_mixed_policy_fix(ctx, policy),
            )
        )
    return found


def _tf_format_weight_loads(ctx: StaticContext, saves: list[tuple[tuple, ast.Call]]) -> list[Diagnostic]:
    """Keras 2 `model.load_weights(path)` of TF-format weights (not .h5, which casts on load)."""
    found = []
    for call in _method_calls(ctx, "load_weights"):
        path = call.args[0] if call.args else keyword_value(call, "filepath")
        suffix = path_suffix(ctx, path, call)
        if suffix is None or suffix.lower().endswith(_H5_SUFFIXES):
            continue
        model = call.func.value  # type: ignore[attr-defined]
        policies = _object_policies(ctx, model, call)
        if policies is None:
            continue
        policies = policies or ctx.policies_at(call)
        low = _pure_low(policies)
        if not low or own_checkpoint(path_key(ctx, path, call), saves):
            continue
        policy = sorted(low)[0]
        confidence = Confidence.MEDIUM if low == set(policies) else Confidence.LOW
        found.append(
            ctx.diagnostic(
                "MP301",
                call,
                f"load_weights() of TF-format weights ({describe_path(ctx, path)}) into a model built under "
                f'policy "{policy}", whose variables are {policy}: {mismatch(policy)}; '
                + advice("load_weights", policy),
                confidence=confidence,
                fix=_mixed_policy_fix(ctx, policy),
            )
        )
    return found


def _mixed_policy_fix(ctx: StaticContext, policy: str) -> Fix | None:
    """`"float16"` -> `"mixed_float16"` at the one place the file sets that policy: the model's variables become
    float32 and restore float32 values. Unsafe: it changes the variables' dtype (and what the file saves)."""
    events = [e for e in ctx.policy_events if e.policy == policy]
    if any(POLICY_SETTERS.get(ctx.call_name(e.node)) for e in events):
        return None  # set_floatx takes no "mixed_" policy: MP102's fix rewrites that call
    fix = policy_literal_fix(ctx.semantic, events[0], f"mixed_{policy}") if len(events) == 1 else None
    if fix is None:
        return None
    return Fix(
        f"build the model under 'mixed_{policy}' (float32 variables restore float32 values)",
        fix.edits,
        applicability="unsafe",
    )


@static_check("MP301", requires=r"restore|read|load_weights")  # each finding is one of these method calls
def check_checkpoint_dtype(ctx: StaticContext) -> Iterable[Diagnostic]:
    return [*_tf1_saver_restores(ctx), *_tf2_restores(ctx)]


@trace_check("MP301")
def trace_checkpoint_dtype_mismatch(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    """A restore the trace recorded failed because checkpoint values and variables differ in dtype: one finding per
    restore call, listing each variable (key, checkpoint dtype, variable dtype)."""
    found = []
    for restore in facts.restores:
        error = restore.error
        verdict = verdict_of(error)
        if not isinstance(verdict, RestoreDtypeVerdict):
            continue
        tensors = verdict.tensors
        where = restore.anchor  # a Saver's builder= goes where the Saver was created
        saver = ctx.call_at(where.line if where else None, "Saver") if restore.receiver_created_at else None
        fix = None
        if (
            saver is not None
            and ctx.static is not None
            and tensors
            and all(t.checkpoint_dtype == "float32" and t.variable_dtype in LOW_DTYPES for t in tensors)
        ):
            fix = saver_builder_fix(ctx.static, saver, "safe")
        variable_dtype = verdict.variable_dtype or "float16"
        checkpoint_dtypes = {t.checkpoint_dtype for t in tensors}
        checkpoint_dtype = checkpoint_dtypes.pop() if len(checkpoint_dtypes) == 1 else "float32"
        kind = "saver" if "Saver" in restore.api else "load_weights" if "load_weights" in restore.api else "checkpoint"
        found.append(
            ctx.diagnostic(
                "MP301",
                where,
                f"{restore.call_text} failed ({_variables(tensors)}): {mismatch(variable_dtype, checkpoint_dtype)}; "
                + advice(kind, variable_dtype),
                fix=fix,
                notes=(
                    "checkpoint keys and dtypes: "
                    + "; ".join(
                        f"{t.name}: checkpoint {t.checkpoint_dtype}, variable {t.variable_dtype}" for t in tensors
                    ),
                ),
            )
        )
    return found


_VARIABLE_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"  # the suffix of every variable's key in a TF2 object-based checkpoint


def _variables(tensors: list) -> str:
    """`6 float32 values for float16 variables: `model/.../1/_kernel` and 5 more` (every key in full in the finding's
    notes)."""
    pairs = {(t.checkpoint_dtype, t.variable_dtype) for t in tensors}
    names = capped([f"`{_short_key(t.name)}`" for t in tensors], shown=1)
    plural = "s" if len(tensors) != 1 else ""
    if len(pairs) == 1:
        [(checkpoint, variable)] = pairs
        return f"{len(tensors)} {checkpoint} value{plural} for {variable} variable{plural}: {names}"
    return f"{len(tensors)} variable{plural} whose dtype differs from the checkpoint's: {names}"


def _short_key(key: str) -> str:
    """`model/_functional/_operations/1/_kernel/.ATTRIBUTES/VARIABLE_VALUE` -> `model/.../1/_kernel`."""
    parts = key.removesuffix(_VARIABLE_VALUE).split("/")
    return "/".join([parts[0], "...", *parts[-2:]]) if len(parts) > 4 else "/".join(parts)


@static_verdicts("MP301")
def restores_that_completed(facts: Facts, ctx: TraceContext) -> dict:
    """A restore the static pass expected to fail on dtypes that the run completed without error: withdrawn."""
    cleared = {}
    for restore in facts.restores:
        if restore.error is None:
            for where in (restore.location, restore.receiver_created_at):
                if where and ctx.shown(where.file) == ctx.display_path:
                    cleared[("MP301", where.line)] = None
    return cleared


_RESTORE_DTYPE = re.compile(r"tensor_name = (\S+?); expected dtype (\w+) does not equal original dtype (\w+)")


@dataclass(frozen=True)
class RestoredTensor:
    name: str  # the checkpoint key, "dense/kernel"
    variable_dtype: str | None
    checkpoint_dtype: str | None


@dataclass(frozen=True, kw_only=True)
class RestoreDtypeVerdict(ExceptionVerdict):
    tensors: list[RestoredTensor]
    variable_dtype: str | None  # the first tensor's
    checkpoint_dtype: str | None


@exception_pattern("MP301", order=20)
def restore_dtype_message(message: str) -> RestoreDtypeVerdict | None:
    """ "tensor_name = dense/kernel; expected dtype half does not equal original dtype float", per tensor once."""
    tensors: list[RestoredTensor] = []
    seen = set()
    for name, expected, original in _RESTORE_DTYPE.findall(message):
        if name in seen:
            continue
        seen.add(name)
        tensors.append(RestoredTensor(name, dtype_name(expected), dtype_name(original)))
    if not tensors:
        return None
    return RestoreDtypeVerdict(
        tensors=tensors, variable_dtype=tensors[0].variable_dtype, checkpoint_dtype=tensors[0].checkpoint_dtype
    )
