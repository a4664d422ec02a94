"""MP702-MP704: `model.quantize(mode)` calls Keras refuses or silently skips."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic
from mpdoctor.facts.dtypes import compute_dtype
from mpdoctor.facts.keras_semantics import INPUT_LAYERS, QUANTIZABLE_LAYERS, SEQUENTIAL
from mpdoctor.facts.quantization import FLOAT16_REFUSED_MODES
from mpdoctor.registry import ExceptionVerdict, define_rule, exception_pattern, static_check, trace_check, verdict_of
from mpdoctor.static.astutil import keyword_value
from mpdoctor.static.policies import dtype_keyword, policy_from_expr
from mpdoctor.static.quantization import QuantizeCall, quantize_calls
from mpdoctor.tf_messages import first_message_line
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts
    from mpdoctor.static.context import StaticContext

define_rule(
    "MP702",
    "quantize-float16-compute",
    "error",
    "ST",
    False,
    summary='`quantize("int8")` on layers computing in float16: Keras refuses it with advice that contradicts itself.',
    what="""
        Keras 3 only. `model.quantize("int8")` (or `layer.quantize`) on a model whose layers compute in float16:
        built or loaded under a `mixed_float16` / `float16` global policy, or with that `dtype=`. The trace reports
        the run's "Quantization mode='int8' doesn't work well with compute_dtype='float16'" as MP702 instead of
        MP001.
        """,
    why="""
        Measured on Keras 3.15.1 (TensorFlow backend): `quantize("int8")` on a `Dense` computing in float16 raises
        "ValueError: Quantization mode='int8' doesn't work well with compute_dtype='float16'. Consider loading
        model/layer with another dtype policy such as 'mixed_bfloat16' or 'mixed_float16' before calling
        `quantize()`": the advice names the policy that fails. What works: build or load the model under
        `float32` (policy `int8_from_float32`) or `mixed_bfloat16` (`int8_from_mixed_bfloat16`, bfloat16 outputs),
        then quantize. `quantize("int4")` and `quantize("float8")` accept float16 compute (measured:
        `int4/128_from_mixed_float16`, `float8_from_mixed_float16`).
        """,
    bad="""
        import keras
        import numpy as np

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(4)])
        model.quantize("int8")
        print(model.predict(np.ones((2, 16), "float32"), verbose=0))
        """,
    good="""
        import keras
        import numpy as np

        keras.mixed_precision.set_global_policy("mixed_bfloat16")   # or build in float32
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(4)])
        model.quantize("int8")
        print(model.predict(np.ones((2, 16), "float32"), verbose=0))
        """,
    fix="""
        None: which policy the model should be built in (float32 or mixed_bfloat16) is the author's choice.
        """,
)

define_rule(
    "MP703",
    "quantize-order",
    "error",
    "ST",
    False,
    summary="`quantize()` before the model is built, or a second time on a quantized model: ValueError.",
    what="""
        Keras 3 only. Static: two `quantize(...)` calls on the same model name in the same block, the second
        raising; `quantize` on a name bound to a `Sequential([...])` of layer constructions with no `Input` or
        input shape, or to a built-in quantizable layer, that nothing uses in between (no build, call, `add`, nor
        a function of the file touching it). Trace: the run's "Cannot quantize a layer that isn't yet built" and
        "Layer '...' is already quantized with dtype_policy=..." are reported as MP703 instead of MP001.
        """,
    why="""
        Measured on Keras 3.15.1: `quantize` needs the float weights, so a `Sequential` without an `Input` (or a
        layer) that was never built or called raises "ValueError: Cannot quantize a layer that isn't yet built".
        A layer quantizes once: a second `quantize`, with another mode or the same, raises "ValueError: Layer
        'dense' is already quantized with dtype_policy='int8_from_float32'. Received: mode=int4". To change mode,
        quantize a fresh float model (reload its float weights).
        """,
    bad="""
        import keras

        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(4)])
        model.quantize("int8")
        model.quantize("int4")
        """,
    good="""
        import keras

        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(4)])
        model.quantize("int4")
        """,
    fix="""
        None: build the model before quantizing (an `Input`, `model.build(shape)` or one call), and quantize each
        float model once.
        """,
)

define_rule(
    "MP704",
    "quantize-skipped-subclass",
    "warning",
    "S",
    False,
    summary="A subclass of `Dense`/`EinsumDense`/`Embedding` is silently left unquantized by `quantize()`.",
    what="""
        Keras 3 only. A file that calls `quantize(mode)` and defines a subclass of a quantizable Keras layer
        (`Dense`, `EinsumDense`, `Embedding`, `ReversibleEmbedding`) that it constructs, without its own
        `quantize` method.
        """,
    why="""
        Their `quantize` checks `type(self) is Dense` (and the like): measured on Keras 3.15.1, `Model.quantize`
        skips a `class MyDense(keras.layers.Dense)` with only a UserWarning "Layer MyDense does not have a
        `quantize` method implemented"; its kernel stays float32 while the rest of the model is quantized. The
        memory saving and the speed the quantization was for are not there, and nothing fails.
        """,
    bad="""
        import keras

        class ScaledDense(keras.layers.Dense):
            def call(self, inputs):
                return super().call(inputs) * 0.5

        model = keras.Sequential([keras.Input((16,)), ScaledDense(8), keras.layers.Dense(4)])
        model.quantize("int8")
        """,
    good="""
        import keras

        model = keras.Sequential(
            [keras.Input((16,)), keras.layers.Dense(8), keras.layers.Rescaling(0.5), keras.layers.Dense(4)]
        )
        model.quantize("int8")
        """,
    fix="""
        None: compose a built-in layer instead of subclassing it, or implement `quantize` (call
        `super().quantize(mode, type_check=False)`) and the quantized call in the subclass.
        """,
)


@static_check("MP702", "MP703", "MP704", requires=r"quantize")
def check_quantize_calls(ctx: StaticContext) -> Iterable[Diagnostic]:
    calls = quantize_calls(ctx)
    if not calls:
        return
    for call in calls:
        if call.mode in FLOAT16_REFUSED_MODES and (found := _float16_compute(ctx, call)) is not None:
            policy, confidence = found
            yield ctx.diagnostic("MP702", call.node, float16_message(call.mode, policy), confidence=confidence)
    yield from _quantized_twice(ctx, calls)
    yield from _quantized_unbuilt(ctx, calls)
    yield from _skipped_subclasses(ctx, calls[0])


# The advice each form of a rule ends with (the static and trace messages share it).
FLOAT16_ADVICE = (
    'Keras\'s advice to load the model in "mixed_float16" is the cause: build or load it in "float32" or '
    '"mixed_bfloat16" before quantizing'
)
REQUANTIZE_ADVICE = "quantize a fresh float model instead"
ALREADY_QUANTIZED = 'a second quantize raises ValueError "is already quantized", whatever the mode'
UNBUILT_ADVICE = "start the model with `keras.Input(shape)` or call its `build(shape)` first"


def float16_message(mode: str, policy: str) -> str:
    return f'quantize("{mode}") on layers computing in float16 (policy "{policy}") raises ValueError; {FLOAT16_ADVICE}'


def _float16_compute(ctx: StaticContext, call: QuantizeCall) -> tuple[str, Confidence] | None:
    """The float16-compute policy the receiver's layers were built under, with how sure that is."""
    built_at: ast.AST = call.node
    if call.receiver_name is not None:
        built_at = ctx.last_assignment(call.receiver_name, call.node) or call.node
    if isinstance(built_at, ast.Call) and (dtype := dtype_keyword(built_at)) is not None:
        policies = frozenset({policy_from_expr(dtype, ctx.imports, ctx.module_constants)})
    else:
        inside = [lc for lc in ctx.layer_calls if built_at is not call.node and _within(ctx, lc.node, built_at)]
        if inside:
            policies = frozenset().union(*(ctx.layer_policies(lc) for lc in inside))
        else:
            policies = ctx.policies_at(built_at)
    float16 = sorted(p for p in policies if p is not None and compute_dtype(p) == "float16")
    if not float16:
        return None
    return float16[0], Confidence.HIGH if len(policies) == len(float16) else Confidence.MEDIUM


def _within(ctx: StaticContext, node: ast.AST | None, ancestor: ast.AST) -> bool:
    while node is not None:
        if node is ancestor:
            return True
        node = ctx.parents.get(node)
    return False


def _quantized_twice(ctx: StaticContext, calls: list[QuantizeCall]) -> Iterable[Diagnostic]:
    """A second `quantize` on the same name in the same block, the name not rebound in between."""
    first_by_block: dict[tuple[str, tuple[int, str]], QuantizeCall] = {}
    for call in calls:
        if call.receiver_name is None:
            continue
        block = _block(ctx, ctx.statement_of(call.node))
        earlier = first_by_block.get((call.receiver_name, block))
        bound = ctx.last_assignment(call.receiver_name, call.node)
        if earlier is not None and bound is ctx.last_assignment(call.receiver_name, earlier.node):
            yield ctx.diagnostic(
                "MP703",
                call.node,
                f"`{call.receiver_name}` is already quantized ({earlier.mode}) at line {earlier.node.lineno}: "
                f"{ALREADY_QUANTIZED}; {REQUANTIZE_ADVICE}",
            )
        else:
            first_by_block[(call.receiver_name, block)] = call


def _quantized_unbuilt(ctx: StaticContext, calls: list[QuantizeCall]) -> Iterable[Diagnostic]:
    """`quantize` on a name bound to a `Sequential([...])` without an input, or to a layer construction, that
    nothing touched in between (no build, call, fit, add; no function of the file that could)."""
    for call in calls:
        name = call.receiver_name
        bound = ctx.last_assignment(name, call.node) if name else None
        if not isinstance(bound, ast.Call) or not _never_built(ctx, bound):
            continue
        target_line = ctx.statement_of(bound).lineno
        uses = [n for n in ctx.nodes_of(ast.Name) if n.id == name and n is not call.receiver]
        if any(
            ctx.enclosing_function(n) is not ctx.enclosing_function(call.node)
            or target_line < n.lineno < call.node.lineno
            or (n.lineno == call.node.lineno and n is not call.receiver and isinstance(n.ctx, ast.Load))
            for n in uses
        ):
            continue
        yield ctx.diagnostic(
            "MP703",
            call.node,
            f"`{name}` is not built when quantized (no input shape, never called): `quantize` raises ValueError "
            f'"Cannot quantize a layer that isn\'t yet built"; start the model with `keras.Input(shape)` or '
            f"call `{name}.build(shape)` first",
        )


def _never_built(ctx: StaticContext, bound: ast.Call) -> bool:
    """A `Sequential([...])` of layer constructions without an input layer or an input shape, or a layer
    construction (not a model)."""
    name = ctx.call_name(bound)
    if name in SEQUENTIAL:
        layers = bound.args[0] if bound.args else keyword_value(bound, "layers")
        if not isinstance(layers, ast.List) or not layers.elts:
            return False
        return all(
            isinstance(e, ast.Call)
            and ctx.call_name(e) not in INPUT_LAYERS
            and ctx.layer_call(e) is not None
            and not any(k.arg in _INPUT_SHAPE_KEYWORDS for k in e.keywords)
            for e in layers.elts
        )
    layer = ctx.layer_call(bound)
    return layer is not None and layer.module is not None and layer.class_name in QUANTIZABLE_LAYERS


_INPUT_SHAPE_KEYWORDS = ("input_shape", "batch_input_shape", "input_dim", "input_length", None)


def _block(ctx: StaticContext, statement: ast.stmt) -> tuple[int, str]:
    """The statement list holding `statement` (an `if` body and its `else` are two blocks)."""
    parent = ctx.parents.get(statement)
    for field, value in ast.iter_fields(parent) if parent is not None else ():
        if isinstance(value, list) and any(item is statement for item in value):
            return id(parent), field
    return id(parent), ""


def _skipped_subclasses(ctx: StaticContext, first: QuantizeCall) -> Iterable[Diagnostic]:
    for name, cls in ctx.classes.items():
        base = _quantizable_base(ctx, cls, 0)
        if base is None or first.mode not in QUANTIZABLE_LAYERS[base] or not ctx.construction_sites(name):
            continue
        yield ctx.diagnostic(
            "MP704",
            cls,
            f'`{name}` subclasses {base}, which `quantize("{first.mode}")` (line {first.node.lineno}) skips with only '
            f"a warning: its kernel stays float32; use {base} itself or implement `quantize` in `{name}`",
            confidence=Confidence.MEDIUM,
        )


def _quantizable_base(ctx: StaticContext, cls: ast.ClassDef, depth: int) -> str | None:
    """The quantizable Keras class `cls` derives from, through classes of the file none of which defines `quantize`."""
    if depth > 8 or any(isinstance(s, ast.FunctionDef) and s.name == "quantize" for s in cls.body):
        return None
    for base in cls.bases:
        name = ctx.resolve(base) or ""
        last = name.rsplit(".", 1)[-1]
        if name.startswith("keras.") and last in QUANTIZABLE_LAYERS:
            return last
        local = ctx.classes.get(base.id) if isinstance(base, ast.Name) else None
        if local is not None and local is not cls and (found := _quantizable_base(ctx, local, depth + 1)):
            return found
    return None


_FLOAT16_REFUSED = re.compile(r"Quantization mode='(\w+)' doesn't work well with compute_dtype='float16'")
_NOT_BUILT = re.compile(r"Cannot quantize a layer that isn't yet built")
_ALREADY = re.compile(r"Layer '([^']+)' is already quantized with dtype_policy='([^']+)'")


@dataclass(frozen=True, kw_only=True)
class QuantizeRefusedVerdict(ExceptionVerdict):
    mode: str


@dataclass(frozen=True, kw_only=True)
class QuantizeOrderVerdict(ExceptionVerdict):
    reason: str  # "not built" | "already quantized"


@exception_pattern("MP702", order=16)
def float16_refused(message: str) -> QuantizeRefusedVerdict | None:
    match = _FLOAT16_REFUSED.search(message)
    return QuantizeRefusedVerdict(mode=match.group(1)) if match else None


@exception_pattern("MP703", order=17)
def quantize_order(message: str) -> QuantizeOrderVerdict | None:
    if _NOT_BUILT.search(message):
        return QuantizeOrderVerdict(reason="not built")
    if _ALREADY.search(message):
        return QuantizeOrderVerdict(reason="already quantized")
    return None


@trace_check("MP702", "MP703")
def trace_quantize_refused(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    exception = facts.exception
    verdict = verdict_of(exception)
    if exception is None:
        return []
    seen = f'the run raised "{first_message_line(exception.message)}"'
    if isinstance(verdict, QuantizeRefusedVerdict):
        message = f'quantize("{verdict.mode}") on layers computing in float16: {seen}; {FLOAT16_ADVICE}'
        return [ctx.diagnostic("MP702", exception.location, message)]
    if isinstance(verdict, QuantizeOrderVerdict):
        advice = UNBUILT_ADVICE if verdict.reason == "not built" else f"{ALREADY_QUANTIZED}; {REQUANTIZE_ADVICE}"
        return [ctx.diagnostic("MP703", exception.location, f"{seen}: {advice}")]
    return []
