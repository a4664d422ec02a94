"""Which risky activation (softmax, log_softmax, sigmoid, exp: those float16 saturates or rounds away) a Keras layer
or a TensorFlow/Keras op applies last, as the source spells it: `Dense(10, activation="softmax")`,
`Activation(tf.nn.softmax)`, `keras.ops.exp(x)`."""

from __future__ import annotations

import ast

from mpdoctor.facts.keras_semantics import RISKY_ACTIVATIONS
from mpdoctor.facts.records import LayerRecord
from mpdoctor.static.astutil import binds
from mpdoctor.static.context import StaticContext

_ACTIVATION_FUNCTIONS = {
    "softmax": "softmax",
    "log_softmax": "log_softmax",
    "sigmoid": "sigmoid",
    "exponential": "exp",
    "exp": "exp",
}
_ACTIVATION_MODULES = (
    "tf.",
    "tf.nn.",
    "tf.math.",
    "keras.activations.",
    "keras.ops.",
    "keras.backend.",
    "keras.ops.nn.",
)


def _activation_function(name: str | None) -> str | None:
    """`tf.nn.softmax` / `keras.activations.sigmoid` / `keras.ops.exp` -> 'softmax' / 'sigmoid' / 'exp'."""
    if not name or "." not in name:
        return None
    module, _, last = name.rpartition(".")
    if module + "." not in _ACTIVATION_MODULES:
        return None
    if last == "exponential" and not module.startswith("keras.activations"):
        return None
    return _ACTIVATION_FUNCTIONS.get(last)


def activation_op(ctx: StaticContext, call: ast.Call) -> str | None:
    """The risky activation an op call computes (`tf.nn.softmax(x)` -> 'softmax'), else None."""
    return _activation_function(ctx.call_name(call))


def activation_value(ctx: StaticContext, expr: ast.AST | None, depth: int = 0) -> str | None:
    if expr is None or depth > 4:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return RISKY_ACTIVATIONS.get(expr.value.lower())
    if isinstance(expr, ast.Name) and ctx.resolve(expr) is None and expr.id in ctx.module_constants:
        function = ctx.enclosing_function(expr)
        if function is None or not binds(function, expr.id):
            return activation_value(ctx, ctx.module_constants[expr.id], depth + 1)
        return None
    return _activation_function(ctx.resolve(expr))


def layer_activation(ctx: StaticContext, layer: LayerRecord) -> str | None:
    """The risky activation (softmax, log_softmax, sigmoid, exp) a built-in layer applies last, else None."""
    if layer.custom:
        return None
    call, kind = layer.node, layer.kind
    if kind == "Softmax":
        return "softmax"
    keyword = next((k.value for k in call.keywords if k.arg == "activation"), None)
    if kind == "Activation":
        return activation_value(ctx, call.args[0] if call.args else keyword)
    if keyword is None and kind == "Dense" and len(call.args) >= 2:
        keyword = call.args[1]
    return activation_value(ctx, keyword)
