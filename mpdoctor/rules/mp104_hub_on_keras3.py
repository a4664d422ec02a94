"""MP104 hub-layer-on-keras3: a tf_keras `hub.KerasLayer` mixed into a Keras 3 model."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic
from mpdoctor.facts.keras_semantics import INPUT_TENSORS, SEQUENTIAL
from mpdoctor.registry import (
    ExceptionVerdict,
    define_rule,
    exception_pattern,
    static_check,
    trace_check,
    verdict_of,
)
from mpdoctor.static.context import StaticContext
from mpdoctor.tf_messages import first_message_line
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts

define_rule(
    "MP104",
    "hub-layer-on-keras3",
    "error",
    "ST",
    False,
    summary="`hub.KerasLayer` (a tf_keras layer) added to a Keras 3 model.",
    what="""
        `hub.KerasLayer` is built on tf_keras (Keras 2). MP104 reports one that is added to a Keras 3 model:
        listed in a `Sequential([...])`, passed to `model.add(...)`, or called on a Keras 3 symbolic tensor
        (`keras.Input`, another layer's output, `model.output`) in the functional API, when the file's Keras is 3
        on its target (`import keras` of keras 3, or `tf.keras` on TF >= 2.16 without `TF_USE_LEGACY_KERAS=1`;
        the target comes from the configuration, the project's declared dependencies, the file, then the
        installed environment: `mpdoctor check --show-target FILE`). A target pinned to TF < 2.16 is Keras 2:
        no finding. Confidence is lowered when the target allows both Keras versions (an unpinned dependency).
        Not reported: `hub.load(...)`, a hub layer called eagerly on tensors or wrapped in a custom layer /
        `Lambda` (those run), and files on tf_keras or with `TF_USE_LEGACY_KERAS=1`.
        """,
    why="""
        Keras 3 only accepts its own layers: `Sequential` raises "Only instances of `keras.Layer` can be added to a
        Sequential model", and the functional API raises "A KerasTensor cannot be used as input to a TensorFlow
        function".
        """,
    bad="""
        import keras
        import tensorflow as tf
        import tensorflow_hub as hub

        class Features(tf.Module):   # a float32 SavedModel, like most TF Hub models
            @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32)])
            def __call__(self, x):
                return tf.nn.relu(x)

        tf.saved_model.save(Features(), "features")
        model = keras.Sequential([
            keras.Input((8,)),
            hub.KerasLayer("features"),   # a tf_keras layer in a Keras 3 model
            keras.layers.Dense(2),
        ])
        """,
    good="""
        import os

        os.environ["TF_USE_LEGACY_KERAS"] = "1"   # before importing tensorflow; needs `pip install tf_keras`
        import tensorflow as tf
        import tensorflow_hub as hub

        class Features(tf.Module):   # a float32 SavedModel, like most TF Hub models
            @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32)])
            def __call__(self, x):
                return tf.nn.relu(x)

        tf.saved_model.save(Features(), "features")
        model = tf.keras.Sequential([
            tf.keras.layers.InputLayer(input_shape=(8,)),
            hub.KerasLayer("features"),
            tf.keras.layers.Dense(2),
        ])
        # or, staying on Keras 3: keras.layers.TFSMLayer("features", call_endpoint="serving_default")
        """,
    fix="""
        No autofix (the choice is a dependency decision): use tf_keras with `TF_USE_LEGACY_KERAS=1` set before
        TensorFlow is imported, or load the SavedModel with `keras.layers.TFSMLayer` (inference only, needs a
        local directory; give it `dtype="float32"` under a float16 policy, see MP201).
        """,
)


@static_check("MP104", requires=r"KerasLayer")
def check_hub_layer_on_keras3(ctx: StaticContext) -> Iterable[Diagnostic]:
    version = ctx.keras_version
    if version.major < 3:
        return
    for call in ctx.calls_named("hub.KerasLayer"):
        how = _keras3_use(ctx, call)
        if how is None:
            continue
        if how == "functional":
            failure = '"A KerasTensor cannot be used as input to a TensorFlow function"'
        else:
            failure = '"Only instances of keras.Layer can be added to a Sequential model"'
        runs = "runs on Keras 3" if version.certain else "runs on Keras 3 on part of its target"
        message = hub_on_keras3(f"{_HOW[how]} fails with {failure}", f"{runs}{_target_note(ctx)}")
        yield ctx.diagnostic(
            "MP104",
            call,
            message,
            notes=(f"Keras 3: {version.reason}",),
            confidence=Confidence.HIGH if version.certain else Confidence.MEDIUM,
        )


def hub_on_keras3(failure: str, runs: str = "runs on Keras 3") -> str:
    """MP104 in the words of both passes: the fact, how it fails (predicted statically, seen when traced), and what
    to do."""
    return (
        f"hub.KerasLayer is a tf_keras (Keras 2) layer and this file {runs}: {failure}; use tf_keras with "
        "TF_USE_LEGACY_KERAS=1 set before importing TensorFlow, or keras.layers.TFSMLayer"
    )


def _target_note(ctx: StaticContext) -> str:
    target = ctx.target
    return target.note() or ("" if target.keras_certain else f" (target: {target.summary()})")


_HOW = {
    "sequential": "adding it to a Keras 3 Sequential model",
    "add": "adding it with model.add()",
    "functional": "calling it on a Keras 3 symbolic tensor",
}


def _keras3_use(ctx: StaticContext, layer: ast.Call) -> str | None:
    """How the hub layer constructed by `layer` enters a Keras 3 model, or None when it never visibly does."""
    how = _use_at(ctx, layer)
    if how:
        return how
    parent = ctx.parents.get(layer)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        name = parent.targets[0].id
        for node in ctx.nodes:
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                bound = ctx.layer_instance(node)
                how = _use_at(ctx, node) if bound is not None and bound.node is layer else None
                if how:
                    return how
    return None


def _use_at(ctx: StaticContext, node: ast.AST) -> str | None:
    parent = ctx.parents.get(node)
    if isinstance(parent, (ast.List, ast.Tuple)):
        holder = ctx.parents.get(parent)
        if isinstance(holder, ast.keyword):
            holder = ctx.parents.get(holder)
        if isinstance(holder, ast.Call) and ctx.call_name(holder) in SEQUENTIAL:
            return "sequential"
    if isinstance(parent, ast.Call):
        if parent.func is node and parent.args and _is_keras_tensor(ctx, parent.args[0], 0):
            return "functional"
        if (
            node in parent.args
            and isinstance(parent.func, ast.Attribute)
            and parent.func.attr == "add"
            and _is_sequential(ctx, parent.func.value)
        ):
            return "add"
    return None


def _is_sequential(ctx: StaticContext, expr: ast.AST) -> bool:
    if isinstance(expr, ast.Name):
        expr = ctx.last_assignment(expr.id, expr) or expr
    return isinstance(expr, ast.Call) and ctx.call_name(expr) in SEQUENTIAL


def _is_keras_tensor(ctx: StaticContext, expr: ast.AST, depth: int) -> bool:
    """A symbolic Keras tensor: `keras.Input(...)`, a layer applied to one, `model.output`, or a name bound to one."""
    if depth > 8:
        return False
    if isinstance(expr, ast.Name):
        value = ctx.last_assignment(expr.id, expr)
        return value is not None and _is_keras_tensor(ctx, value, depth + 1)
    if isinstance(expr, ast.Subscript):
        return _is_keras_tensor(ctx, expr.value, depth + 1)
    if isinstance(expr, ast.Attribute):
        return expr.attr in ("input", "inputs", "output", "outputs") and not (
            isinstance(expr.value, ast.Name) and expr.value.id == "self"
        )
    if isinstance(expr, ast.Call):
        if ctx.call_name(expr) in INPUT_TENSORS:
            return True
        if ctx.producer(expr) is not None and expr.args:
            return _is_keras_tensor(ctx, expr.args[0], depth + 1)
    return False


@trace_check("MP104")
def trace_hub_layer_on_keras3(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    exception = facts.exception
    verdict = verdict_of(exception)
    if not isinstance(verdict, HubLayerVerdict) or facts.keras_major < 3:
        return []
    hub_loads = [load for load in facts.savedmodel_loads if load.api == "hub.KerasLayer"]
    where = hub_loads[-1].location if hub_loads else exception.location
    return [
        ctx.diagnostic(
            "MP104",
            where,
            hub_on_keras3(f'building the model failed with "{first_message_line(exception.message)}"'),
        )
    ]


_ONLY_LAYERS_IN_SEQUENTIAL = re.compile(r"Only instances of `?keras\.Layer`? can be added to a Sequential model")
_RECEIVED_CLASS = re.compile(r"\(of type <class '([^']+)'>\)")
_KERAS_TENSOR_TO_TF = "A KerasTensor cannot be used as input to a TensorFlow function"


@dataclass(frozen=True, kw_only=True)
class HubLayerVerdict(ExceptionVerdict):
    reason: str  # "sequential" (added to a Sequential) | "keras_tensor" (called on a KerasTensor)
    received_class: str | None = None  # "tensorflow_hub.keras_layer.KerasLayer"


@exception_pattern("MP104", order=10)
def hub_layer_message(message: str) -> HubLayerVerdict | None:
    """A `hub.KerasLayer` in a Keras 3 model."""
    if _ONLY_LAYERS_IN_SEQUENTIAL.search(message):
        received = _RECEIVED_CLASS.search(message)
        received_class = received.group(1) if received else None
        if "tensorflow_hub" in message or (received_class or "").endswith("KerasLayer"):
            return HubLayerVerdict(reason="sequential", received_class=received_class)
        return None
    if _KERAS_TENSOR_TO_TF in message and ("(type KerasLayer)" in message or "tensorflow_hub" in message):
        return HubLayerVerdict(reason="keras_tensor", received_class="tensorflow_hub.keras_layer.KerasLayer")
    return None
