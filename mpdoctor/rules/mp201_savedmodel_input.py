"""MP201 savedmodel-input-dtype: a SavedModel-backed layer fed a dtype its SavedModel does not accept."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic, Fix
from mpdoctor.facts.dtypes import compute_dtype, is_float, low_precision
from mpdoctor.facts.keras_semantics import (
    INPUT_LAYERS,
    NON_FLOAT_OUTPUT_LAYERS,
    SAVEDMODEL_LAYER_CLASSES,
    SAVEDMODEL_LAYERS,
)
from mpdoctor.facts.records import LayerRecord, SourceRef
from mpdoctor.registry import (
    FLOAT16_TEXT,
    ExceptionVerdict,
    define_rule,
    exception_pattern,
    static_check,
    trace_check,
    verdict_of,
)
from mpdoctor.static.astutil import has_star_kwargs, keyword_value
from mpdoctor.static.context import StaticContext
from mpdoctor.static.policies import dtype_keyword
from mpdoctor.tf_messages import (
    CANNOT_COMPUTE,
    DTYPE,
    FUNCTION_OP,
    dtype_name,
    first_message_line,
    is_precision_mismatch,
)
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts, SavedModelLoad

define_rule(
    "MP201",
    "savedmodel-input-dtype",
    "error",
    "STA",
    True,
    summary="A SavedModel-backed layer (hub.KerasLayer, TFSMLayer) is fed float16 but its SavedModel only takes "
    "float32.",
    what="""
        A layer that calls a SavedModel (`hub.KerasLayer`, `keras.layers.TFSMLayer`, a `tf.saved_model.load`
        object called inside a layer) computes in float16 or bfloat16 because a mixed policy is in force (or its
        own `dtype=` says so). Like every Keras layer it first autocasts its input to its compute dtype, then
        calls the SavedModel with that float16 tensor. A SavedModel exported in float32, which is most TF Hub
        models, has no concrete function or signature accepting float16.

        The static pass reports such a layer under a float16/bfloat16 policy that has no `dtype="float32"`. It
        cannot read the SavedModel, so it reports with medium confidence; the trace and artifact passes confirm
        it by reading the signatures when the handle is a readable local path. Layers whose `dtype=` is not a
        float (`dtype=tf.string` text encoders), handles that look like text models, and layers the static pass
        sees fed strings or integer ids (an `Input(dtype=tf.string)` or `dtype="int32"`, the dict of ids a text
        preprocessor returns, lookup layers) are not reported: autocast casts floating inputs only, so no float16
        reaches their SavedModel. When what the layer is fed cannot be told, it is reported at low confidence
        ("if it is fed floats"); the trace does not report a SavedModel that accepts no floating input. A
        SavedModel layer created inside a custom layer's `__init__` takes the global policy, whatever `dtype=` the
        outer layer was given.
        """,
    why="""
        With tf_keras, `hub.KerasLayer` fails when the model is built ("Could not find matching concrete function
        to call loaded from the SavedModel", or on recent TF "Binding inputs to tf.function failed ... Can not cast
        TensorSpec(dtype=tf.float16) to TensorSpec(dtype=tf.float32)"). With Keras 3, `TFSMLayer` builds fine and
        fails later, at `predict`/`fit` ("Expects arg[0] to be float but half is provided").

        The popular workaround of casting to float32 just before the layer (`Lambda(lambda x: tf.cast(x,
        tf.float32))`) does not help: the SavedModel layer autocasts that float32 tensor straight back to float16
        (see MP207). The layer itself has to compute in float32; the rest of the model keeps its mixed policy.
        """,
    bad="""
        import os

        os.environ["TF_USE_LEGACY_KERAS"] = "1"   # hub.KerasLayer needs tf_keras
        import tensorflow as tf
        import tensorflow_hub as hub

        class Features(tf.Module):   # a float32 SavedModel, like most TF Hub models
            @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32)])
            def __call__(self, x):
                return tf.nn.relu(x)

        tf.saved_model.save(Features(), "features")
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        model = tf.keras.Sequential([
            tf.keras.layers.InputLayer(input_shape=(8,)),
            tf.keras.layers.Lambda(lambda x: tf.cast(x, tf.float32)),   # does not help (MP207)
            hub.KerasLayer("features"),   # autocasts to float16: no function of the SavedModel takes it
            tf.keras.layers.Dense(2, dtype="float32"),
        ])
        """,
    good="""
        import os

        os.environ["TF_USE_LEGACY_KERAS"] = "1"   # hub.KerasLayer needs tf_keras
        import tensorflow as tf
        import tensorflow_hub as hub

        class Features(tf.Module):   # a float32 SavedModel, like most TF Hub models
            @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32)])
            def __call__(self, x):
                return tf.nn.relu(x)

        tf.saved_model.save(Features(), "features")
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        model = tf.keras.Sequential([
            tf.keras.layers.InputLayer(input_shape=(8,)),
            hub.KerasLayer("features", dtype="float32"),   # computes in float32
            tf.keras.layers.Dense(2, dtype="float32"),
        ])
        # Keras 3: keras.layers.TFSMLayer("features", call_endpoint="serving_default", dtype="float32")
        """,
    fix="""
        Adds `dtype="float32"` to the SavedModel layer's constructor (or replaces its float16 `dtype=`). The layer
        then casts its input to float32 and calls the SavedModel's float32 function; the layers after it still
        compute in float16. A SavedModel that really was exported in float16 would need the opposite: check its
        signature with `saved_model_cli show --dir PATH --all`. From the static pass alone (the SavedModel's
        signatures not read) the fix is unsafe and says "this layer will run in float32": were the finding wrong,
        the layer's whole computation (an encoder, say) would leave mixed precision. The trace pass reads the
        signatures and gives the same fix as safe.
        """,
)


# Handles of TF Hub models whose inputs are strings or token ids: autocast never touches those.
_TEXT_HANDLE = re.compile(
    r"nnlm|universal[-_]sentence[-_]encoder|bert|electra|albert|talking-heads|wiki[-_]words|gnews[-_]swivel|"
    r"elmo|labse|muril|preprocess|tokeni[sz]|/text[-_/]|text[-_]embedding"
)


@static_check("MP201", requires=(FLOAT16_TEXT, r"KerasLayer|TFSMLayer"))
def check_savedmodel_input_dtype(ctx: StaticContext) -> Iterable[Diagnostic]:
    for layer in ctx.layer_calls:
        if layer.qualname not in SAVEDMODEL_LAYERS:
            continue
        policy = ctx.float16_policy(ctx.layer_policies(layer))
        if policy is None or _text_input_layer(ctx, layer.node):
            continue
        fed = _fed(ctx, layer)
        if fed == _OTHER:
            continue  # strings or integer ids: autocast casts floating inputs only, no float16 reaches the model
        compute = compute_dtype(policy)
        explicit = dtype_keyword(layer.node) is not None
        if layer.qualname == "hub.KerasLayer" and ctx.is_keras3:
            outcome = "the model will still fail to build once it runs on tf_keras (MP104)"
        elif layer.qualname == "hub.KerasLayer":
            outcome = "the model fails when it is built"
        else:
            outcome = "the model builds but predict/fit fail"
        subject = casts_to_float16(layer.label, compute, policy, explicit, surely_floats=fed == _FLOAT)
        message = (
            f"{subject}, but a SavedModel exported in float32 (most TF Hub models) has no {compute} concrete "
            f"function, so {outcome}; {ADVICE}"
        )
        fix = None
        if not has_star_kwargs(layer.node):
            # Unsafe: the SavedModel's signatures were not read, and if the finding is wrong the user's main compute
            # (a whole encoder) loses mixed precision. The trace pass, which reads them, gives a safe fix instead.
            fix = replace(
                ctx.add_keyword_fix(
                    layer.node,
                    "dtype",
                    '"float32"',
                    f'compute {layer.kind} in float32 (dtype="float32"); this layer will run in float32: all it '
                    "computes loses mixed precision unless its SavedModel only has float32 functions anyway",
                ),
                applicability="unsafe",
            )
        notes = (
            f"A Lambda or tf.cast to float32 before {layer.kind} does not help: the layer casts its input "
            f"back to {compute} (MP207).",
            "Static check: the SavedModel's signatures were not read; a SavedModel exported in "
            f"{compute} would accept these inputs.",
        )
        if fed is None:
            notes += ("What this layer is fed could not be told: strings or integer ids are never autocast.",)
        yield ctx.diagnostic(
            "MP201",
            layer.node,
            message,
            confidence=Confidence.MEDIUM if fed == _FLOAT else Confidence.LOW,
            fix=fix,
            notes=notes,
        )


# What a SavedModel layer is fed, as far as autocast is concerned.
_FLOAT, _OTHER = "float", "other"
_PREPROCESSOR_HANDLE = re.compile(r"preprocess|tokeni[sz]")


def _fed(ctx: StaticContext, layer: LayerRecord) -> str | None:
    """_FLOAT, _OTHER (strings, integer ids: autocast leaves them alone) or None (unknown) for what the layer is
    fed: its own `input_shape=` (a float32 Input is made for it), the layer before it in a `Sequential([...])`,
    or the tensors it is called on. A float anywhere makes it float."""
    if _declares_input_shape(layer.node):
        return _FLOAT
    kinds = {_tensor_kind(ctx, arg, 0) for arg in _applied_to(ctx, layer)}
    previous = _previous_element(ctx, layer)
    if previous is not None:
        kinds.add(_layer_output_kind(ctx, previous, 0))
    if _FLOAT in kinds:
        return _FLOAT
    return _OTHER if kinds == {_OTHER} else None


def _declares_input_shape(call: ast.Call) -> bool:
    shape = keyword_value(call, "input_shape")
    return isinstance(shape, (ast.List, ast.Tuple)) and bool(shape.elts)


def _previous_element(ctx: StaticContext, layer: LayerRecord) -> LayerRecord | None:
    """The layer before this one in a `Sequential([...])` list."""
    parent = ctx.parents.get(layer.node)
    if not isinstance(parent, (ast.List, ast.Tuple)):
        return None
    index = next(i for i, e in enumerate(parent.elts) if e is layer.node)
    if index == 0:
        return None
    previous = parent.elts[index - 1]
    name = ctx.call_name(previous) if isinstance(previous, ast.Call) else None
    if name in INPUT_LAYERS:  # `keras.Input(shape=...)` as the first element
        return ctx.layer_record(previous, name)
    return ctx.layer_instance(previous)


def _applied_to(ctx: StaticContext, layer: LayerRecord) -> list[ast.AST]:
    """The first argument of each call of the layer: `hub.KerasLayer(...)(x)`, or `enc = hub.KerasLayer(...)` then
    `enc(x)` in the same scope."""
    node = layer.node
    parent = ctx.parents.get(node)
    if isinstance(parent, ast.Call) and parent.func is node:
        return parent.args[:1]
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        name = parent.targets[0].id
        scope = ctx.enclosing_function(node) or ctx.tree
        return [
            use.args[0]
            for use in ctx.walk_scope(scope)
            if isinstance(use, ast.Call) and isinstance(use.func, ast.Name) and use.func.id == name and use.args
        ]
    return []


def _layer_output_kind(ctx: StaticContext, producer: LayerRecord, depth: int) -> str | None:
    """What a layer outputs, as far as autocast is concerned."""
    if producer.custom:
        return None
    if producer.qualname in INPUT_LAYERS:
        dtype_expr = keyword_value(producer.node, "dtype")
        if dtype_expr is None:
            return _FLOAT  # inputs default to float32
        dtype = _dtype_text(ctx, dtype_expr)
        return None if dtype is None else (_FLOAT if is_float(dtype) else _OTHER)
    if producer.qualname in SAVEDMODEL_LAYERS:
        # A text preprocessor (named so, or itself fed strings) returns a dict of int32 ids for the encoder after
        # it; other SavedModels may return anything.
        handle = _string_value(ctx, _handle_argument(producer.node), producer.node)
        if handle and _PREPROCESSOR_HANDLE.search(handle.lower()):
            return _OTHER
        return _OTHER if depth < 8 and _fed(ctx, producer) == _OTHER else None
    return _OTHER if producer.kind in NON_FLOAT_OUTPUT_LAYERS else _FLOAT


def _tensor_kind(ctx: StaticContext, expr: ast.AST | None, depth: int) -> str | None:
    if expr is None or depth > 8:
        return None
    if isinstance(expr, ast.Name):
        return _tensor_kind(ctx, ctx.last_assignment(expr.id, expr), depth + 1)
    if isinstance(expr, ast.Subscript):  # `preprocessed["input_word_ids"]`: an item of what produced the dict
        return _tensor_kind(ctx, expr.value, depth + 1)
    if isinstance(expr, ast.Dict):
        kinds = {_tensor_kind(ctx, v, depth + 1) for v in expr.values}
        return _FLOAT if _FLOAT in kinds else (_OTHER if kinds == {_OTHER} else None)
    if not isinstance(expr, ast.Call):
        return None
    name = ctx.call_name(expr)
    if name in INPUT_LAYERS:
        return _layer_output_kind(ctx, ctx.layer_record(expr, name), depth)
    producer = ctx.producer(expr)
    return None if producer is None else _layer_output_kind(ctx, producer, depth + 1)


def _dtype_text(ctx: StaticContext, expr: ast.AST | None) -> str | None:
    """`"int32"`, `tf.string`, `np.int64`... -> the dtype's name; None when it cannot be told."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return dtype_name(expr.value)
    name = ctx.resolve(expr) if expr is not None else None
    if name and name.startswith(("tf.", "np.", "keras.")) and name.count(".") == 1:
        return dtype_name(name.rsplit(".", 1)[-1])
    return None


def _handle_argument(call: ast.Call) -> ast.AST | None:
    return (
        call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in ("handle", "filepath")), None)
    )


def _text_input_layer(ctx: StaticContext, call: ast.Call) -> bool:
    """A SavedModel layer that takes strings or token ids (text encoders): its inputs are never autocast."""
    for kw in call.keywords:
        if kw.arg == "input_shape" and isinstance(kw.value, (ast.List, ast.Tuple)) and not kw.value.elts:
            return True  # `input_shape=[]`: one string per example
    text = _string_value(ctx, _handle_argument(call), call)
    return bool(text and _TEXT_HANDLE.search(text.lower()))


def _string_value(ctx: StaticContext, expr: ast.AST | None, at: ast.AST, depth: int = 0) -> str | None:
    """A string literal, f-string head, `a + b` of those, or a name bound to one (best effort)."""
    if expr is None or depth > 5:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.JoinedStr):
        return "".join(v.value for v in expr.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        parts = [_string_value(ctx, side, at, depth + 1) for side in (expr.left, expr.right)]
        return "".join(p for p in parts if p) or None
    if isinstance(expr, ast.Name):
        value = ctx.last_assignment(expr.id, at) or ctx.module_constants.get(expr.id)
        return _string_value(ctx, value, at, depth + 1)
    if isinstance(expr, ast.Call) and ctx.call_name(expr) in _LOADS:  # `hub.KerasLayer(hub.load(path))`
        return _string_value(ctx, expr.args[0] if expr.args else None, at, depth + 1)
    return None


_LOADS = ("hub.load", "tf.saved_model.load", "tf.compat.v2.saved_model.load")

ADVICE = 'pass dtype="float32" to this layer'


def casts_to_float16(subject: str, compute: str, policy: str | None, explicit: bool, surely_floats: bool = True) -> str:
    """MP201's fact in the words of both passes: what the layer feeds its SavedModel and why (`surely_floats`
    False: the static pass could not tell that the layer is fed floats, and autocast casts floats only)."""
    given = f'dtype="{policy}"' if explicit else f'policy "{policy}"'
    casts = f"casts its input to {compute}" + ("" if surely_floats else " if it is fed floats")
    return f"{subject} computes in {compute} ({given}) and {casts} before calling its SavedModel"


def _dtype_fix(ctx: TraceContext, where: SourceRef | None) -> Fix | None:
    return ctx.float32_fix(
        where, SAVEDMODEL_LAYER_CLASSES, 'pass dtype="float32" so the layer feeds its SavedModel float32'
    )


@trace_check("MP201")
def trace_savedmodel_input_dtype(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    """Compare what each SavedModel-backed layer feeds its SavedModel (its compute dtype, after autocast) with the
    input dtypes the SavedModel's concrete functions / signatures accept."""
    found = []
    exception = facts.exception
    for load in facts.savedmodel_loads:
        record = facts.layer(load.layer_uid)
        info = load.savedmodel
        accepted = info.accepted_input_dtypes if info is not None else []
        if record is None or info is None or info.error or not accepted:
            continue
        received = record.compute_dtype
        if not record.autocast or not low_precision(received) or received in accepted:
            continue
        if not any(is_float(dtype) for dtype in accepted):
            continue  # strings or integer ids only: autocast leaves them alone, no float16 reaches the SavedModel
        # The run's own error (TensorFlow's TensorSpec dump, or an op name) goes in the notes (JSON, --verbose):
        # the message says its cause.
        raised = exception if exception is not None and exception.layer_uid == load.layer_uid else None
        observed = (
            f"the run failed ({raised.type or 'an error'})"
            if raised is not None
            else 'calling it fails ("Could not find matching concrete function")'
        )
        notes = (f"the run's error: {first_message_line(raised.message)}",) if raised is not None else ()
        subject = casts_to_float16(
            f"{load.api} `{record.name}`", received, record.policy, record.explicit_dtype is not None
        )
        found.append(
            ctx.diagnostic(
                "MP201",
                load.location,
                f"{subject}, but the SavedModel at {load.handle} accepts only {', '.join(accepted)}, so {observed}; "
                + ADVICE,
                layer=record.name,
                fix=_dtype_fix(ctx, load.location),
                notes=notes,
            )
        )
    verdict = verdict_of(exception)
    if not found and isinstance(verdict, SavedModelInputVerdict):
        load = _failing_load(facts)
        where = load.location if load else exception.location
        accepted = ", ".join(verdict.accepted) or "float32"
        found.append(
            ctx.diagnostic(
                "MP201",
                where,
                f"a SavedModel-backed layer fed its SavedModel {verdict.received}, but the "
                f"SavedModel accepts only {accepted}, so the run failed; {ADVICE}",
                fix=_dtype_fix(ctx, where),
            )
        )
    return found


def _failing_load(facts: Facts) -> SavedModelLoad | None:
    uid = facts.exception.layer_uid if facts.exception else None
    loads = [load for load in facts.savedmodel_loads if load.layer_uid]
    for load in loads:
        if load.layer_uid == uid:
            return load
    return loads[-1] if loads else None


# ---------------------------------------------------------------- what TensorFlow says when it happens

_CANNOT_CAST = re.compile(
    rf"Can not cast TensorSpec\([^`]*?dtype=({DTYPE})[^`]*?\) to "
    rf"TensorSpec\([^`]*?dtype=({DTYPE})"
)
_NO_MATCHING_CONCRETE = "Could not find matching concrete function to call loaded from the SavedModel"
_GOT_TENSOR_DTYPE = re.compile(rf"<tf\.Tensor [^>]*?dtype=({DTYPE})>")
_SPEC_DTYPE = re.compile(rf"TensorSpec\(.*?dtype=({DTYPE})", re.DOTALL)
_EXPECTS_ARG = re.compile(rf"Expects arg\[(\d+)\] to be ({DTYPE}) but ({DTYPE}) is provided")


@dataclass(frozen=True, kw_only=True)
class SavedModelInputVerdict(ExceptionVerdict):
    received: str  # "float16"
    accepted: list[str]  # ["float32"]
    pattern: str  # which message
    arg_index: int | None = None  # "Expects arg[i] ..."
    function: str | None = None  # the failing op, when it is a loaded function


def _mp201(
    received: str, accepted: list[str], pattern: str, arg_index: int | None = None, function: str | None = None
) -> SavedModelInputVerdict | None:
    accepted_names = sorted({dtype_name(dtype) or dtype for dtype in accepted})
    received_name = dtype_name(received) or received
    if not is_precision_mismatch(received_name, accepted_names):
        return None
    return SavedModelInputVerdict(
        received=received_name, accepted=accepted_names, pattern=pattern, arg_index=arg_index, function=function
    )


@exception_pattern("MP201", order=30)
def savedmodel_input_message(message: str) -> SavedModelInputVerdict | None:
    """A tensor reaches a SavedModel function with a dtype it was not traced for."""
    match = _CANNOT_CAST.search(message)
    if match:
        return _mp201(match.group(1), [match.group(2)], "cannot_cast_tensorspec")
    if _NO_MATCHING_CONCRETE in message:
        got, _, expected = message.partition("Expected these arguments to match")
        received = _GOT_TENSOR_DTYPE.search(got)
        options = re.split(r"Option \d+:", expected)[1:] or [expected]
        accepted = [found.group(1) for found in (_SPEC_DTYPE.search(option) for option in options) if found]
        if received and accepted:
            return _mp201(received.group(1), accepted, "no_matching_concrete_function")
        return None
    match = _EXPECTS_ARG.search(message)
    if match:
        return _mp201(match.group(3), [match.group(2)], "expects_arg", arg_index=int(match.group(1)))
    match = CANNOT_COMPUTE.search(message)
    if match and FUNCTION_OP.search(match.group(1)):
        return _mp201(
            match.group(4), [match.group(3)], "function_input", function=match.group(1), arg_index=int(match.group(2))
        )
    return None
