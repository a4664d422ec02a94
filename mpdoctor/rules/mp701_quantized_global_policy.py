"""MP701 quantized-global-policy: a quantized dtype policy set globally, or given to a layer that cannot run it."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic
from mpdoctor.facts.keras_semantics import MODEL_CLASS_NAMES, QUANTIZABLE_LAYERS
from mpdoctor.facts.quantization import QuantizedPolicy, quantized_policy
from mpdoctor.registry import ExceptionVerdict, define_rule, exception_pattern, static_check, trace_check, verdict_of
from mpdoctor.static.astutil import keyword_value
from mpdoctor.static.policies import dtype_keyword
from mpdoctor.static.quantization import quantized_policy_of
from mpdoctor.tf_messages import first_message_line
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts
    from mpdoctor.static.context import StaticContext

define_rule(
    "MP701",
    "quantized-global-policy",
    "error",
    "ST",
    False,
    summary="A quantized dtype policy (`int8_from_float32`, ...) set globally or given to a layer that has no "
    "quantized call: the first call raises NotImplementedError.",
    what="""
        Keras 3 only. A quantized policy name (`"int8_from_float32"`, `"int4_from_mixed_bfloat16"`,
        `"float8_from_float32"`, a `QuantizedDTypePolicy(...)`) passed to `keras.config.set_dtype_policy` /
        `keras.mixed_precision.set_global_policy`, or as the `dtype=` of a layer class that has no quantized call
        for that mode (any class but `Dense`, `EinsumDense`, `Embedding`, `ReversibleEmbedding`; the Embeddings
        only for int8/int4). The trace reports the run's
        "Layer Sequential does not have a `_int8_call` method implemented" (and its int4/float8/gptq/awq twins)
        as MP701 instead of MP001.
        """,
    why="""
        A quantized policy is how Keras *deserializes* a quantized layer; it is not a switch for the whole model.
        Set globally, every layer built after it takes it, the containers included: measured on Keras 3.15.1
        (TensorFlow backend), `Sequential` and functional models raise "NotImplementedError: Layer Sequential
        does not have a `_int8_call` method implemented" at their first call (the same for int4 and float8:
        `_int4_call`, `_float8_call`; `int8_from_mixed_bfloat16` too; keras-team/keras#23479). A `Dense` built
        this way alone runs, but its kernel is a fresh int8 zero tensor with `trainable=False`: only a quantized
        checkpoint gives it values. What works: build (or load) the model in `float32` or `mixed_bfloat16`,
        then `model.quantize("int8")`, or a `keras.dtype_policies.DTypePolicyMap` naming the quantized layers.
        """,
    bad="""
        import keras
        import numpy as np

        keras.config.set_dtype_policy("int8_from_float32")
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(4)])
        print(model.predict(np.ones((2, 16), "float32"), verbose=0))
        """,
    good="""
        import keras
        import numpy as np

        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(4)])
        model.quantize("int8")   # Dense kernels become int8 + per-channel scales; the Sequential stays float32
        print(model.predict(np.ones((2, 16), "float32"), verbose=0))
        """,
    fix="""
        None: `quantize()` needs a built model with its float weights, which only the author can place.
        """,
)


@static_check("MP701", requires=r"_from_|DTypePolicy")
def check_quantized_policy(ctx: StaticContext) -> Iterable[Diagnostic]:
    if not ctx.is_keras3:
        return
    for event in ctx.policy_events:
        call = event.node
        if not isinstance(call, ast.Call):
            continue
        arg = call.args[0] if call.args else keyword_value(call, "policy")
        policy = quantized_policy_of(ctx, arg)
        if policy is not None:
            yield ctx.diagnostic("MP701", call, global_message(policy))
    for layer in ctx.layer_calls:
        dtype = dtype_keyword(layer.node) if isinstance(layer.node, ast.Call) else None
        policy = quantized_policy_of(ctx, dtype)
        if policy is None or (policy.mode in QUANTIZABLE_LAYERS.get(layer.class_name, ()) and layer.module):
            continue  # a built-in quantizable layer built to receive quantized weights (how Keras loads them)
        if _is_model(ctx, layer.class_name):
            continue  # measured: `keras.Model(inputs, outputs, dtype="int8_from_float32")` ignores the dtype
        yield ctx.diagnostic("MP701", layer.node, layer_message(policy, layer.class_name))


def _is_model(ctx: StaticContext, class_name: str) -> bool:
    cls = ctx.classes.get(class_name)
    return class_name in MODEL_CLASS_NAMES or (cls is not None and ctx.is_custom_model(cls))


def global_message(policy: QuantizedPolicy, seen: str = "") -> str:
    """`seen`: what the trace observed, said before the advice both forms end with."""
    return (
        f'global policy "{policy.name}" is a quantized policy: every layer built after it takes it, and the '
        f"model itself (Sequential, Functional) and each layer without a quantized call raise NotImplementedError "
        f'("does not have a `_{policy.mode}_call` method") at the first call; {seen + "; " if seen else ""}'
        f'build the model in "{policy.source}", then `model.quantize("{policy.mode}")`'
    )


def layer_message(policy: QuantizedPolicy, class_name: str) -> str:
    return (
        f'`{class_name}` with dtype "{policy.name}": {class_name} has no `_{policy.mode}_call`, so its first call '
        f'raises NotImplementedError; give it "{policy.source}" and quantize the model with '
        f'`model.quantize("{policy.mode}")`'
    )


_NO_QUANTIZED_CALL = re.compile(r"Layer (\w+) does not have a `_(int8|int4|float8|gptq|awq)_call` method implemented")


@dataclass(frozen=True, kw_only=True)
class QuantizedCallVerdict(ExceptionVerdict):
    mode: str
    failing_class: str


@exception_pattern("MP701", order=15)
def no_quantized_call(message: str) -> QuantizedCallVerdict | None:
    """A layer (often the model itself) computing under a quantized policy without a quantized call."""
    match = _NO_QUANTIZED_CALL.search(message)
    return QuantizedCallVerdict(mode=match.group(2), failing_class=match.group(1)) if match else None


@trace_check("MP701")
def trace_quantized_policy(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    exception = facts.exception
    verdict = verdict_of(exception)
    if exception is None or not isinstance(verdict, QuantizedCallVerdict):
        return []
    seen = f'the run raised "{first_message_line(exception.message)}"'
    events = [(e, p) for e in facts.policy_events if (p := quantized_policy(e.policy)) is not None]
    if events:
        event, policy = events[-1]
        return [ctx.diagnostic("MP701", event.location or exception.location, global_message(policy, seen))]
    message = (
        f"`{verdict.failing_class}` computes under a quantized {verdict.mode} policy but has no "
        f"`_{verdict.mode}_call`; {seen}. Build it in a float policy and quantize the model with "
        f'`model.quantize("{verdict.mode}")`'
    )
    return [ctx.diagnostic("MP701", exception.location, message, confidence=Confidence.MEDIUM)]
