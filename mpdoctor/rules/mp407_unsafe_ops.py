"""MP407 unsafe-op-in-float16: overflow-prone ops computed in float16 in user code (TF's mixed-precision deny list)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic
from mpdoctor.facts.op_dtypes import F16, F32
from mpdoctor.registry import define_rule, static_check, static_verdicts
from mpdoctor.static.astutil import keyword_value
from mpdoctor.static.context import StaticContext
from mpdoctor.static.dataflow import Flow, flow_of, last_part, render
from mpdoctor.static.float16_regions import Region, float16_regions
from mpdoctor.static.literals import float16_problem, number
from mpdoctor.trace_context import TraceContext
from mpdoctor.trace_user_code import downgrade, unsafe_ops, user_layers

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts

define_rule(
    "MP407",
    "unsafe-op-in-float16",
    "warning",
    "ST",
    False,
    summary="Overflow-prone op (exp, pow, square, sum/mean, log, softmax cross-entropy) on float16 in user code.",
    what="""
        An op that TensorFlow's own automatic-mixed-precision rewrite refuses to run in float16 (its DENY list, in
        `tensorflow/core/grappler/optimizers/auto_mixed_precision_lists.h`: Exp, Expm1, Pow, Mean, Sum, L2Loss,
        SoftmaxCrossEntropyWithLogits, SparseSoftmaxCrossEntropyWithLogits), or an op whose float16 result
        overflows or flushes easily, is applied to a float16 tensor in user code (custom layer `call` and its
        helpers, `Lambda` functions). Keras mixed precision does NOT apply that deny list: your ops run in the
        dtype of their inputs. Spellings `tf.*`, `tf.math.*`, `tf.nn.*`, `keras.ops.*` and `keras.backend.*`:

        - exp, expm1 (overflow for x > 11.1: `tf.exp(12.)` is inf in float16);
        - pow, `x ** p` with an exponent outside [-0.5, 1] or a tensor exponent, square (inf above 256),
          `tf.nn.l2_loss`;
        - reduce_sum and reduce_mean (`tf.reduce_mean` of 100000 float16 values of 1000 is NaN on CPU; the sum
          overflows); medium confidence, since the static pass cannot see the reduced size. `keras.ops.mean` is
          not flagged: Keras 3 accumulates it in float32 (measured), and neither is `tf.nn.moments`, which
          upcasts float16 itself;
        - log of an unguarded value (values below 5.96e-8 flush to 0 and give -inf); `log(x + eps)` with a
          representable eps, `log(tf.maximum(x, eps))` / `log(clip_by_value(...))` and `log1p` are not flagged;
        - softmax cross-entropy (`tf.nn.softmax_cross_entropy_with_logits`, its sparse variant,
          `keras.ops`/`keras.backend` (sparse_)categorical_crossentropy) on float16 logits.

        Not flagged: operands that are provably float32 (`tf.exp(tf.cast(x, tf.float32))`), Python numbers
        (`self.dim ** -0.5`), and bfloat16 compute (float32 range). softplus is deliberately not flagged: TF's
        float16 softplus kernel is overflow-safe (`softplus(60000.)` is 60000 in float16, measured) and AMP lists
        it as safe to infer.

        Trace form: a finding whose line runs that op (Exp, Pow, Square, Sum, Mean, Log, ...) in float16 in the
        traced graph of the layer is confirmed; one whose line computes in float32 there is downgraded to info.
        The trace never adds MP407 findings of its own (the static pass knows which uses are guarded); whether the
        op actually overflowed on the sample batch is MP404.
        """,
    why="""
        float16 tops out at 65504 and has ~3 significant digits: `exp` of anything above 11.1, the square of
        anything above 256, or a sum of a few thousand moderate values is inf, and inf turns into NaN in the next
        subtraction or division. The full model may train for hours before an input large enough comes along.
        """,
    bad="""
        import keras
        from keras import ops

        keras.mixed_precision.set_global_policy("mixed_float16")

        class GatedPool(keras.layers.Layer):
            def call(self, x):
                weights = ops.exp(x)   # inf once x > 11
                return ops.sum(x * weights, axis=1) / ops.sum(weights, axis=1)

        inputs = keras.Input((32, 16))
        model = keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(GatedPool()(inputs)))
        """,
    good="""
        import keras
        from keras import ops

        keras.mixed_precision.set_global_policy("mixed_float16")

        class GatedPool(keras.layers.Layer):
            def call(self, x):
                x32 = ops.cast(x, "float32")   # run the sensitive part in float32
                weights = ops.softmax(x32, axis=1)
                return ops.cast(ops.sum(x32 * weights, axis=1), x.dtype)

        inputs = keras.Input((32, 16))
        model = keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(GatedPool()(inputs)))
        """,
    fix="""
        No autofix: cast the operand to float32 for the sensitive op and cast the result back to the compute dtype
        (`tf.cast(..., x.dtype)`), or use a stable formulation (softmax / logsumexp instead of exp and sum).
        """,
)


_EXP = {"exp", "expm1"}
_POW = {"pow", "power", "square", "l2_loss"}
_REDUCE = {"reduce_sum", "reduce_mean", "sum", "mean"}
_CROSS_ENTROPY = {
    "softmax_cross_entropy_with_logits",
    "softmax_cross_entropy_with_logits_v2",
    "sparse_softmax_cross_entropy_with_logits",
    "categorical_crossentropy",
    "sparse_categorical_crossentropy",
}
_LOG = {"log"}
_OP_PREFIXES = ("tf.", "tf.math.", "tf.nn.", "keras.ops.", "keras.ops.numpy.", "keras.ops.nn.", "keras.backend.")


def _unsafe_op(ctx: StaticContext, name: str | None) -> str | None:
    if not name:
        return None
    prefix, _, short = name.rpartition(".")
    if prefix + "." not in _OP_PREFIXES:
        return None
    if short == "mean" and prefix.startswith("keras.ops") and ctx.is_keras3:
        return None  # Keras 3 accumulates float16 means in float32 (measured)
    if short in _EXP or short in _POW or short in _REDUCE or short in _LOG:
        return short
    if short in _CROSS_ENTROPY and prefix in ("tf.nn", "keras.ops", "keras.ops.nn", "keras.backend"):
        return short
    return None


def _guarded_log_argument(flow: Flow, expr: ast.AST, depth: int = 0) -> bool:
    """`x + eps` with a float16-representable positive eps, `maximum(x, eps)`, `clip(...)`, softmax+eps..."""
    if depth > 4:
        return False
    if isinstance(expr, ast.Name):
        value, _ = flow.binding(expr)
        return (
            value is not None and not isinstance(value, ast.AugAssign) and _guarded_log_argument(flow, value, depth + 1)
        )
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        for side in (expr.left, expr.right):
            value = number(side)
            if value is None and isinstance(side, ast.Name):
                bound, _local = flow.binding(side)
                value = number(bound if bound is not None else flow.ctx.module_constants.get(side.id))
            if value is None and isinstance(side, ast.Attribute):
                return True  # `self.eps`: a guard (MP403 judges its value)
            if value is not None and value > 0 and float16_problem(value) is None:
                return True
        return False
    if isinstance(expr, ast.Call):
        name = flow.ctx.call_name(expr) or ""
        return (
            last_part(name) in ("maximum", "clip_by_value", "clip", "softplus", "sigmoid", "add")
            or last_part(name) == "epsilon"
        )
    return False


def _risky_reduction(ctx: StaticContext, flow: Flow, call: ast.Call, operand: ast.AST | None) -> bool:
    """A float16 sum/mean likely to overflow: a full reduction (no axis), or one over squares/powers/exponentials
    (`reduce_sum(x * x)`, `reduce_mean(tf.square(x))`, `reduce_sum(tf.exp(z))`). A sum of bounded values over one
    axis (attention-weighted features) is not flagged: the static pass cannot see its size."""
    if len(call.args) < 2 and keyword_value(call, "axis") is None:
        return True
    return operand is not None and _grows(ctx, flow, operand, 0)


def _grows(ctx: StaticContext, flow: Flow, expr: ast.AST, depth: int) -> bool:
    if depth > 4:
        return False
    if isinstance(expr, ast.Name):
        value, _ = flow.binding(expr)
        return value is not None and not isinstance(value, ast.AugAssign) and _grows(ctx, flow, value, depth + 1)
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, ast.Pow):
            return not _is_pow_safe_exponent(expr.right)
        if isinstance(expr.op, ast.Mult) and ast.dump(expr.left) == ast.dump(expr.right):
            return True
        return _grows(ctx, flow, expr.left, depth + 1) or _grows(ctx, flow, expr.right, depth + 1)
    if isinstance(expr, ast.Call):
        op = _unsafe_op(ctx, ctx.call_name(expr))
        return op in _EXP or op in _POW
    return False


_MAX_LIKE = {"reduce_max", "max", "amax", "reduce_logsumexp", "logsumexp"}
_NON_NEGATIVE = {"abs", "square", "relu", "softplus", "exp", "sqrt", "absolute"}


def _non_positive(ctx: StaticContext, flow: Flow, expr: ast.AST, depth: int) -> bool:
    """`x - reduce_max(x)`, `x - logsumexp(x)`, `-abs(x)`, `-x ** 2`: exp of these is at most 1 (stable softmax)."""
    if depth > 4:
        return False
    if isinstance(expr, ast.Name):
        value, _ = flow.binding(expr)
        return value is not None and not isinstance(value, ast.AugAssign) and _non_positive(ctx, flow, value, depth + 1)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Sub):
        return _is_call_to(ctx, flow, expr.right, _MAX_LIKE, depth)
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = expr.operand
        if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Pow) and number(inner.right) == 2.0:
            return True
        return _is_call_to(ctx, flow, inner, _NON_NEGATIVE, depth)
    return False


def _is_call_to(ctx: StaticContext, flow: Flow, expr: ast.AST, shorts: set[str], depth: int) -> bool:
    if isinstance(expr, ast.Name):
        value, _ = flow.binding(expr)
        return value is not None and depth < 4 and _is_call_to(ctx, flow, value, shorts, depth + 1)
    if isinstance(expr, ast.Call):
        name = ctx.call_name(expr) or ""
        if last_part(name) == "stop_gradient" and expr.args:
            return _is_call_to(ctx, flow, expr.args[0], shorts, depth + 1)
        return last_part(name) in shorts
    return False


def _is_pow_safe_exponent(node: ast.AST) -> bool:
    value = number(node)
    return value is not None and -0.5 <= value <= 1.0


_OPERATIONS = frozenset({ast.BinOp, ast.Call})


@static_check("MP407")
def check_unsafe_ops(ctx: StaticContext) -> Iterable[Diagnostic]:
    seen: set[ast.AST] = set()
    for region in float16_regions(ctx):
        if not region.float16_policy:
            continue  # bfloat16 has float32's range
        flow = flow_of(ctx, region)
        for node in ctx.scope_nodes_of(region.function, _OPERATIONS):
            if node in seen:
                continue
            diagnostic = _unsafe_operation(ctx, flow, region, node)
            if diagnostic is not None:
                seen.add(node)
                yield diagnostic


def _unsafe_operation(ctx: StaticContext, flow: Flow, region: Region, node: ast.AST) -> Diagnostic | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        return _unsafe_power(ctx, flow, region, node)
    if not isinstance(node, ast.Call):
        return None
    op = _unsafe_op(ctx, ctx.call_name(node))
    if op is None:
        return None
    operands = _operands(node, op)
    kinds = [flow.kind(o).kind for o in operands]
    if F16 not in kinds or F32 in kinds or _safe_here(ctx, flow, node, op, operands):
        return None
    return _mp407_diagnostic(ctx, region, node, op)


def _unsafe_power(ctx: StaticContext, flow: Flow, region: Region, node: ast.BinOp) -> Diagnostic | None:
    """`x ** n` with a float16 operand (and no float32 one), unless a float16 base is raised to at most 1."""
    base, exponent = flow.kind(node.left).kind, flow.kind(node.right).kind
    if F16 not in (base, exponent) or F32 in (base, exponent):
        return None
    if base == F16 and _is_pow_safe_exponent(node.right):
        return None
    return ctx.diagnostic(
        "MP407",
        node,
        f"`{render(ctx, node)}` raises a float16 tensor to a power in {region.where} (policy {region.float16_policy}): "
        "x ** 2 is inf above 256; compute it in float32",
        confidence=Confidence.HIGH,
    )


def _operands(node: ast.Call, op: str) -> list[ast.AST]:
    """The arguments whose dtype decides whether the op runs in float16."""
    operands = node.args[:2] if op in ("pow", "power") else node.args[:1]
    if op in _CROSS_ENTROPY:
        keywords = (keyword_value(node, k) for k in ("logits", "output", "y_pred"))
        operands = [o for o in [*node.args[:2], *keywords] if o is not None]
    if not operands:
        first = keyword_value(node, "x") or keyword_value(node, "input_tensor")
        operands = [first] if first is not None else []
    return operands


def _safe_here(ctx: StaticContext, flow: Flow, node: ast.Call, op: str, operands: list[ast.AST]) -> bool:
    """A guarded log, a bounded reduction, exp of a non-positive value, a power of at most 1."""
    first = operands[0] if operands else None
    if op == "log" and first is not None and _guarded_log_argument(flow, first):
        return True
    if op in _REDUCE and not _risky_reduction(ctx, flow, node, first):
        return True
    if op in _EXP and first is not None and _non_positive(ctx, flow, first, 0):
        return True
    return op in ("pow", "power") and len(node.args) > 1 and _is_pow_safe_exponent(node.args[1])


unsafe_op_findings = check_unsafe_ops  # the static MP407 findings, for the trace forms


def _mp407_diagnostic(ctx: StaticContext, region: Region, node: ast.Call, op: str) -> Diagnostic:
    name = ctx.call_name(node)
    policy = region.float16_policy
    if op in _EXP:
        why, confidence = "exp overflows float16 for inputs above 11.1 (inf, then NaN downstream)", Confidence.HIGH
    elif op in _POW:
        why, confidence = "squares and powers overflow float16 above 256 (x**2)", Confidence.HIGH
    elif op in _REDUCE:
        why, confidence = (
            (
                "a float16 sum/mean over many elements overflows (inf) or loses the small terms; "
                "TF's mixed-precision rewrite runs Sum/Mean in float32"
            ),
            Confidence.MEDIUM,
        )
    elif op in _LOG:
        why, confidence = (
            (
                "values below 6e-8 flush to 0 in float16 and log gives -inf; add a representable "
                "epsilon or compute in float32"
            ),
            Confidence.MEDIUM,
        )
    else:
        why, confidence = (
            ("softmax cross-entropy is on TF's mixed-precision deny list: compute the loss from float32 logits"),
            Confidence.MEDIUM,
        )
    return ctx.diagnostic(
        "MP407",
        node,
        f"`{name}` runs on float16 tensors in {region.where} (policy {policy}): {why}",
        confidence=confidence,
    )


@static_verdicts("MP407")
def verdicts(facts: Facts, ctx: TraceContext) -> dict:
    """ "confirm" when the finding's line runs the op in float16 in the traced graph of a user layer; "downgrade"
    when the line lies in traced float16 user code that computes nothing in float16 there."""
    layers = user_layers(facts)
    if not layers or ctx.static is None:
        return {}
    ops = unsafe_ops(facts)
    found = {}
    for static in unsafe_op_findings(ctx.static):
        key = (static.code, static.location.line, static.location.column)
        if key[1] in ops:  # the op the finding names (`tf.square` -> Square), else the line's first one
            named = re.search(r"`[\w.]*?(\w+)`", static.message)
            short = named.group(1).replace("_", "").replace("reduce", "").lower() if named else ""
            layer, op = next((hit for hit in ops[key[1]] if hit[1].op.lower() == short), ops[key[1]][0])
            found[key] = ("confirm", f"trace: `{layer.id}` runs `{op.op}` in float16 on line {op.line}")
        elif (verdict := downgrade(layers, {static.location.line})) is not None:
            found[key] = verdict
    return found
