"""MP401 float16-output-activation and MP402 float16-model-output: model outputs computed in float16."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic, Fix
from mpdoctor.facts.dtypes import compute_dtype, low_precision
from mpdoctor.facts.keras_semantics import INCLUDE_TOP_POSITION, WRAPPER_LAYERS, risky_activation
from mpdoctor.facts.loss_outputs import float16_loss_outputs
from mpdoctor.facts.records import LayerRecord
from mpdoctor.registry import define_rule, static_check, trace_check
from mpdoctor.static.activations import activation_op, activation_value, layer_activation
from mpdoctor.static.context import StaticContext, policy_confidence
from mpdoctor.static.topology import layer_inputs, model_output_layers, tensor_sources
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts

define_rule(
    "MP401",
    "float16-output-activation",
    "error",
    "ST",
    True,
    summary="A model output is a softmax / sigmoid / log_softmax / exp computed in float16.",
    what="""
        A model output is produced by softmax, sigmoid, log_softmax or exp (a `Softmax` layer, an `Activation`
        layer, or `activation=` on Dense/Conv/RNN layers, or a `softmax`/`sigmoid` op applied to the last layer)
        whose compute dtype is float16 or bfloat16: the global policy is `mixed_float16`/`mixed_bfloat16`/
        `float16`/`bfloat16` and the layer has no `dtype="float32"`. Also raised at a `keras.applications`
        constructor (`ResNet50(...)`, `MobileNetV2(...)`) built with the default `include_top=True` and
        `classifier_activation="softmax"` under a float16 policy: its `predictions` Dense is float16 too.

        The static pass finds the output layer as the last element of `Sequential([...])`, the last
        `model.add(...)` of a Sequential (every branch of an `if`), the `outputs` of a functional
        `Model(inputs, outputs)` (list and dict outputs, tensors returned by a helper function), what the `call`
        of a `keras.Model` subclass returns, the inner layer of `TimeDistributed(...)`, and nested models used as
        the last block. Softmax in hidden layers and in models used as blocks of another model (attention
        weights, squeeze-and-excitation gates) is not reported, nor are activations passed as variables whose
        value the static pass cannot see. An `Activation("linear", dtype="float32")` placed after a float16
        softmax (a common misreading of the guide) does not save it: it only casts probabilities that were
        already computed in float16, so the softmax layer before it is reported (both passes), and the fix moves
        the activation into the float32 layer.
        """,
    why="""
        Under a float16 policy the last Dense computes its logits AND its activation in float16: logits whose
        matmul exceeds 65504 become inf and softmax returns NaN; probabilities below 6e-8 flush to 0 and sigmoid
        saturates to exactly 1.0, so the cross-entropy sees log(0) (clipped to a wrong constant) and the gradient
        of confident mistakes is lost. The model output (and the loss and metrics computed from it) is float16.
        Measured on TF 2.21 with both Keras 2 and Keras 3: `Dense(3, activation="softmax")` under
        `mixed_float16` returns NaN for inputs of 3e4, and `softmax([0, 20])` gives `[0.0, 1.0]` instead of
        `[2.1e-09, 1.0]`; with `dtype="float32"` on that layer both are correct. The TensorFlow mixed precision
        guide asks for the output softmax in float32 for this reason.
        """,
    bad="""
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.Input((784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),       # softmax in float16
        ])
        """,
    good="""
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.Input((784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10),
            keras.layers.Activation("softmax", dtype="float32"),   # or Dense(10, activation="softmax", dtype="float32")
        ])
        """,
    fix="""
        Adds `dtype="float32"` to the output layer (replacing a float16 `dtype=` if present), so the layer runs its
        matmul and activation in float32 and returns float32; for a `tf.nn.softmax`/`keras.ops.softmax` op applied
        to the last layer, the `dtype="float32"` goes on that layer. For `TimeDistributed(Dense(...))` it goes on
        both layers (measured: Keras 3 follows the wrapper's dtype, tf_keras the inner layer's). Safe: only the
        last layer leaves float16 and its cost is negligible. For `keras.applications` models there is no
        autofix: build with `include_top=False` and add your own head with a float32 output, or pass
        `classifier_activation=None` and append `keras.layers.Activation("softmax", dtype="float32")`.
        """,
)

define_rule(
    "MP402",
    "float16-model-output",
    "warning",
    "T",
    True,
    summary="A model output tensor is float16 (loss and metrics then run in float16).",
    what="""
        The trace pass builds the model and finds an output tensor whose dtype is float16 or bfloat16 that MP401
        does not already explain (typically a linear `Dense(n)` head under `mixed_float16`, a regression output,
        or logits used with `from_logits=True`). An uncompiled model whose output layer a compiled model uses inside
        (a decoder for inference built from a trained autoencoder's layers) is not reported: no loss reads it;
        nor an uncompiled model of a script that only runs inference (`predict`) and never
        compiles, fits, evaluates, saves or exports a model: no loss, metric or export consumer reads its output.
        """,
    why="""
        Keras computes the loss and metrics on the output tensor. In float16 a regression target above 65504 (or
        its square in MSE) overflows, small errors lose precision (float16 has ~3 decimal digits), and
        accumulating metrics drift. Exported models expose a float16 output that consumers do not expect
        (see MP203). The mixed precision guide recommends float32 model outputs.
        """,
    bad="""
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = keras.Input((64,))
        x = keras.layers.Dense(128, activation="relu")(inputs)
        outputs = keras.layers.Dense(1)(x)          # float16 output
        model = keras.Model(inputs, outputs)
        """,
    good="""
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = keras.Input((64,))
        x = keras.layers.Dense(128, activation="relu")(inputs)
        x = keras.layers.Dense(1)(x)
        outputs = keras.layers.Activation("linear", dtype="float32")(x)
        model = keras.Model(inputs, outputs)
        """,
    fix="""
        Appends `Activation("linear", dtype="float32")` to that output (or adds `dtype="float32"` to the output
        layer), which casts the result to float32 at negligible cost.
        """,
)


def _wrapped_layer(ctx: StaticContext, layer: LayerRecord) -> LayerRecord | None:
    """The inner layer of `TimeDistributed(Dense(...))`."""
    if layer.custom or layer.kind not in WRAPPER_LAYERS:
        return None
    inner = (
        layer.node.args[0]
        if layer.node.args
        else next((k.value for k in layer.node.keywords if k.arg == "layer"), None)
    )
    return ctx.layer_instance(inner) if inner is not None else None


@static_check("MP401")
def check_float16_output_activation(ctx: StaticContext) -> Iterable[Diagnostic]:
    if not ctx.any_float16_policy:
        return
    for out in model_output_layers(ctx):
        if isinstance(out.layer, LayerRecord):
            yield from _check_output_layer(ctx, out.layer, out.how)
        elif activation_op(ctx, out.layer):
            yield from _check_output_op(ctx, out.layer, out.how)
        else:
            yield from _check_application(ctx, out.layer)


def _check_output_layer(ctx: StaticContext, layer: LayerRecord, how: str) -> Iterable[Diagnostic]:
    inner = _wrapped_layer(ctx, layer)
    target = inner or layer
    activation = layer_activation(ctx, target)
    if activation is None:
        yield from _check_behind_float32_cast(ctx, layer, how)
        return
    # A wrapper (`TimeDistributed(Dense(..., activation="softmax"))`): measured on TF 2.21, Keras 3 computes the
    # inner layer under the WRAPPER's dtype (inner dtype="float32" alone still gives float16 NaN), tf_keras under
    # the INNER layer's (wrapper dtype="float32" alone still NaN). The fix sets both.
    governing = layer if inner is not None and ctx.is_keras3 else target
    policies = ctx.layer_policies(governing)
    policy = ctx.float16_policy(policies)
    if policy is None:
        return
    edits = []
    for part in (target, layer) if inner is not None else (target,):
        if ctx.float16_policy(ctx.layer_policies(part)) or not _explicit_float32(ctx, part):
            edits += ctx.add_keyword_fix(part.node, "dtype", '"float32"', "").edits
    where = f"{target.kind} inside {layer.kind}" if inner is not None else target.kind
    yield ctx.diagnostic(
        "MP401",
        target.node,
        f"model output {where} ({how}) "
        + float16_output(activation, compute_dtype(policy), policy, "both layers" if inner else "this layer"),
        confidence=policy_confidence(policies),
        fix=Fix(f"compute the output {where} in float32", tuple(sorted(edits, key=lambda e: (e.line, e.column)))),
    )


_LINEAR = frozenset({"keras.activations.linear", "tf.keras.activations.linear", "tf_keras.activations.linear"})


def _linear_argument(ctx: StaticContext, layer: LayerRecord) -> ast.AST | None:
    """The activation argument of `Activation("linear")` (or `Activation(keras.activations.linear)`): a layer that
    computes nothing and only casts to its own dtype. None for any other layer."""
    if layer.custom or layer.kind != "Activation":
        return None
    call = layer.node
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "activation"), None)
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.lower() == "linear":
        return arg
    if arg is not None and ctx.resolve(arg) in _LINEAR:
        return arg
    return None


def _check_behind_float32_cast(ctx: StaticContext, cast: LayerRecord, how: str) -> Iterable[Diagnostic]:
    """`Dense(n, activation="softmax")` followed by `Activation("linear", dtype="float32")` as the output: the
    softmax still runs in float16 (NaN and flushed probabilities are only cast to float32 afterwards)."""
    linear = _linear_argument(ctx, cast)
    if linear is None or not _explicit_float32(ctx, cast):
        return
    producers = layer_inputs(ctx, cast)
    if len(producers) != 1 or _wrapped_layer(ctx, producers[0]) is not None:
        return
    producer = producers[0]
    activation = layer_activation(ctx, producer)
    policies = ctx.layer_policies(producer)
    policy = ctx.float16_policy(policies)
    if activation is None or policy is None:
        return
    dtype = compute_dtype(policy)
    yield ctx.diagnostic(
        "MP401",
        producer.node,
        f"{producer.kind} computes {activation} in {dtype} under {policy} before the model output ({how}), "
        f'{_consequence(dtype, activation)}; the {ctx.segment(cast.node.func)}("linear", dtype=float32) on line '
        f"{cast.node.lineno} only casts the result: move the activation into that float32 layer",
        confidence=policy_confidence(policies),
        fix=_move_activation_fix(ctx, producer, cast, linear),
    )


def _move_activation_fix(ctx: StaticContext, producer: LayerRecord, cast: LayerRecord, linear: ast.AST) -> Fix | None:
    """`Dense(n, activation="softmax")` + `Activation("linear", dtype="float32")` ->
    `Dense(n)` + `Activation("softmax", dtype="float32")`."""
    call = producer.node
    if producer.kind == "Softmax" or producer.kind == "Activation":
        return None  # the producer is the activation itself: nothing is left of it once moved
    value = next((k.value for k in call.keywords if k.arg == "activation"), None)
    if value is None and producer.kind == "Dense" and len(call.args) >= 2:
        value = call.args[1]
    removal = ctx.remove_argument(call, value) if value is not None else None
    if removal is None:
        return None
    return Fix(
        f"move the {ctx.segment(value)} activation into the float32 {cast.kind}",
        tuple(sorted((removal, ctx.edit(linear, ctx.segment(value))), key=lambda e: (e.line, e.column))),
    )


def _explicit_float32(ctx: StaticContext, layer: LayerRecord) -> bool:
    return any(p == "float32" for p in ctx.layer_policies(layer)) and len(ctx.layer_policies(layer)) == 1


def float16_output(activation: str, dtype: str, policy: str | None, target: str = "this layer", note: str = "") -> str:
    """The fact and the advice of MP401 in the words of both passes, after the subject ("model output Dense (...)"
    statically, "output `probs` of model `m`" when traced): `computes softmax in float16 (policy "mixed_float16"),
    so ...; set dtype="float32" on this layer`."""
    under = f' (policy "{policy}")' if policy else ""
    return (
        f"computes {activation} in {dtype}{under}{note}, {_consequence(dtype, activation)}; "
        f'set dtype="float32" on {target}'
    )


def _consequence(dtype: str, activation: str) -> str:
    """What goes wrong, as measured on TF 2.21 (see the MP401 docs)."""
    if dtype == "bfloat16":  # float32's range, but an 8-bit mantissa: nothing overflows, results round coarsely
        return {
            "softmax": "so with ~3 significant digits the top probability rounds to exactly 1.0 once the others sum "
            "below ~0.002 (bfloat16 softmax([0, 6]) is [0.0025, 1.0])",
            "log_softmax": "so log-probabilities keep only ~3 significant digits",
            "sigmoid": "so with ~3 significant digits it returns exactly 1.0 for logits from about 6 (bfloat16 "
            "sigmoid(6) is 1.0)",
            "exp": "so the result keeps only ~3 significant digits",
        }[activation]
    return {
        "softmax": "so logits beyond 65504 give NaN and probabilities below 6e-8 flush to 0",
        "log_softmax": "so logits beyond 65504 give NaN and log-probabilities keep only ~3 significant digits",
        "sigmoid": "so it returns exactly 1.0 for logits above ~8 and logits beyond 65504 give NaN",
        "exp": "so it overflows to inf for inputs above ~11",
    }[activation]


def _check_output_op(ctx: StaticContext, op: ast.Call, how: str) -> Iterable[Diagnostic]:
    name = ctx.call_name(op) or ""
    in_call_method = _in_call_method(ctx, op)
    if ctx.is_keras3 and name.startswith("tf.") and not in_call_method:
        return  # Keras 3 functional models reject TF ops on KerasTensors: the model does not build at all
    arg = op.args[0] if op.args else next((k.value for k in op.keywords if k.arg in ("x", "logits", "features")), None)
    sources = tensor_sources(ctx, arg, how, 0, frozenset()) if arg is not None else []
    layers = [s.layer for s in sources if isinstance(s.layer, LayerRecord)]
    if len(layers) != 1 or len(sources) != 1:
        return
    producer = layers[0]
    policies = ctx.layer_policies(producer)
    policy = ctx.float16_policy(policies)
    if policy is None:
        return
    fix = None
    if not producer.custom:
        fix = ctx.add_keyword_fix(
            producer.node,
            "dtype",
            '"float32"',
            f"compute {producer.kind} in float32 so {name.rsplit('.', 1)[-1]} gets float32",
        )
    yield ctx.diagnostic(
        "MP401",
        op,
        f"model output {name} ({how}) gets the {compute_dtype(policy)} output of {producer.kind} and "
        + float16_output(activation_op(ctx, op) or "softmax", compute_dtype(policy), policy, f"that {producer.kind}"),
        confidence=policy_confidence(policies),
        fix=fix,
    )


def _check_application(ctx: StaticContext, call: ast.Call) -> Iterable[Diagnostic]:
    name = ctx.call_name(call) or ""
    arch = name.rsplit(".", 1)[-1]
    include_top = _application_argument(ctx, call, "include_top", arch)
    activation = _application_argument(ctx, call, "classifier_activation", arch)
    if include_top is _UNKNOWN or activation is _UNKNOWN:
        return
    if include_top is not None and not (isinstance(include_top, ast.Constant) and include_top.value is True):
        return
    act = "softmax" if activation is None else activation_value(ctx, activation)
    if act is None:
        return
    policies = ctx.policies_at(call)
    policy = ctx.float16_policy(policies)
    if policy is None:
        return
    yield ctx.diagnostic(
        "MP401",
        call,
        f"{arch} with include_top=True ends in a Dense ('predictions') that computes {act} in "
        f'{compute_dtype(policy)} (policy "{policy}"), {_consequence(compute_dtype(policy), act)}; use '
        f"include_top=False with your own float32 output layer, or classifier_activation=None followed by "
        f'Activation("{act}", dtype="float32")',
        confidence=policy_confidence(policies),
    )


_UNKNOWN = object()


def _application_argument(ctx: StaticContext, call: ast.Call, param: str, arch: str):
    """The expression given for `param`, None when left to its default, _UNKNOWN when it cannot be told."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return _UNKNOWN
    for kw in call.keywords:
        if kw.arg == param:
            return kw.value
    if param == "include_top":
        position = INCLUDE_TOP_POSITION.get(arch, (0, 0))[1 if ctx.is_keras3 else 0]
        if arch.startswith("RegNet") and not ctx.is_keras3:
            position = 1
        return call.args[position] if len(call.args) > position else None
    return None if len(call.args) < 6 else _UNKNOWN


def _in_call_method(ctx: StaticContext, node: ast.AST) -> bool:
    function = ctx.enclosing_function(node)
    return (
        function is not None
        and function.name == "call"  # type: ignore[attr-defined]
        and ctx.enclosing_class(function) is not None
    )


@trace_check("MP401", "MP402")
def trace_float16_outputs(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    """Model outputs observed as float16/bfloat16: MP401 when a saturating activation (softmax, sigmoid...)
    produced them in low precision, MP402 otherwise (unless MP503 reports that output: its compiled loss was seen
    computing in float16)."""
    found = []
    by_loss = {(id(model), node.id) for model, _, _, node in float16_loss_outputs(facts)}
    # An uncompiled model whose output layer a compiled model uses inside (the decoder built for `predict` from a
    # trained autoencoder's layers) is an inference model: no loss or metric reads that output, and in the trained
    # model it is an inner tensor, so MP402 would be false there (issue 14 item 6). MP401 still stands (`predict`).
    trained_layers = {n.uid for m, g in facts.graphs() if m.compiled for n in g.nodes if n.uid}
    for model, graph in facts.graphs():
        for node, output in graph.output_nodes():
            # Judge what the model returns on its sample call; the declared dtype only when the call did not run.
            dtype = output.actual_dtype
            if not low_precision(dtype):
                continue
            confidence = Confidence.HIGH if output.observed else Confidence.MEDIUM
            declared = "" if output.observed else f" (its declared dtype: {_not_called(facts)})"
            activation = risky_activation(node.class_name, node.activation)
            if (id(model), node.id) in by_loss and not activation:
                continue
            fix = ctx.float32_fix(node.created_at, (node.class_name,), 'set dtype="float32" on the output layer')
            if activation:
                found.append(
                    ctx.diagnostic(
                        "MP401",
                        node.created_at,
                        f"output `{node.id}` of model `{model.name}` "
                        + float16_output(activation, dtype, node.policy, note=declared),
                        layer=node.id,
                        fix=fix,
                        confidence=confidence,
                    )
                )
            elif (model.compiled or node.uid is None or node.uid not in trained_layers) and not (
                not model.compiled and _inference_only(ctx)
            ):
                found.append(
                    ctx.diagnostic(
                        "MP402",
                        node.created_at,
                        f"output `{node.id}` of model `{model.name}` is {dtype}{declared}: "
                        f"the loss and metrics are then computed in {dtype}; end the model with "
                        f'Activation("linear", dtype="float32") or give this layer dtype="float32"',
                        layer=node.id,
                        fix=fix,
                        confidence=confidence,
                    )
                )
    return found


# What a file that trains, evaluates against a loss or exports a model spells (any mention keeps MP402), and what
# one that runs a model for inference does.
_TRAINS_OR_EXPORTS = re.compile(
    r"\.(?:compile|fit|fit_generator|train_on_batch|evaluate|save|save_weights|export)\s*\(|GradientTape|"
    r"saved_model|apply_gradients|tflite|TFLiteConverter"
)
_RUNS_INFERENCE = re.compile(r"\.predict(?:_on_batch)?\s*\(")


def _inference_only(ctx: TraceContext) -> bool:
    """The file predicts with a model and never compiles, fits, evaluates, saves or exports one (issue 29):
    its uncompiled model's float16 output reaches no loss, metric or consumer of an export, so MP402's reason does
    not hold (RULES.md: the loss and metrics then run in float16). A module that only builds a model (compiled by
    another module) is no such file: it keeps MP402."""
    text = ctx.text or ""
    return bool(_RUNS_INFERENCE.search(text)) and not _TRAINS_OR_EXPORTS.search(text)


def _not_called(facts: Facts) -> str:
    if facts.stopped:
        return "the trace ran out of time before it could call the model"
    return "the model could not be called to observe it"


@trace_check("MP401")
def trace_softmax_behind_float32_cast(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    """A float32 output that is only `Activation("linear", dtype="float32")` cast of a softmax (sigmoid...) the
    run saw computed in float16: the output dtype is right, the probabilities were already damaged."""
    found = []
    for model, graph in facts.graphs():
        for node, output in graph.output_nodes():
            if node.class_name != "Activation" or node.activation != "linear" or low_precision(output.actual_dtype):
                continue
            edges = [e for e in graph.edges if e.target == node.id]
            source = graph.node(edges[0].source) if len(edges) == 1 else None
            if source is None:
                continue
            activation = risky_activation(source.class_name, source.activation)
            dtype = edges[0].dtype or next(iter(source.output_dtypes), None)
            if activation is None or not low_precision(dtype):
                continue
            found.append(
                ctx.diagnostic(
                    "MP401",
                    source.created_at,
                    f"`{source.id}` of model `{model.name}` computes {activation} in {dtype} "
                    f'(policy "{source.policy}"); the float32 `{node.id}` after it only casts the result, so the '
                    f"output is float32 but {_consequence(dtype, activation).removeprefix('so ')}: move the "
                    f"activation into that float32 layer",
                    layer=source.id,
                )
            )
    return found
