"""The dtype prediction of the trace child's graph (rules 1 and 2 of mpdoctor.trace.child.graph): what a layer's
autocast makes of its inputs, what dtypes its outputs should have, and whether the observation agrees. Pure
functions of the layer and the observed dtypes; the Keras semantics they read are facts/keras_semantics.py's."""

from __future__ import annotations

from mpdoctor.facts.dtypes import dtype_name as _dt
from mpdoctor.facts.dtypes import is_float as _is_float
from mpdoctor.facts.keras_semantics import (
    DTYPE_KWARGS,
    FLOAT_PRODUCERS,
    KERAS3_OP_DTYPES,
    TF_OP_DTYPES,
    autocasts_argument,
)
from mpdoctor.trace.child.layer_api import LayerApi

# Kinds whose prediction must match the observation exactly (else: a `mismatches` entry).
STRICT_KINDS = frozenset({"input", "model", "builtin"})
_FLOAT_RANK = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}


def post_cast(api: LayerApi, op, kind: str, inputs: list, pre: list) -> list:
    """The dtypes a layer's call sees after its autocast (rule 1 of mpdoctor.trace.child.graph)."""
    if kind in ("input", "op", "model"):
        return list(pre)
    target = api.cast_target(op)
    if target is None:
        return list(pre)
    keras3 = api.keras3
    return [
        target if _is_float(dtype) and autocasts_argument(3 if keras3 else 2, arg_index) else dtype
        for dtype, (_, arg_index, _) in zip(pre, inputs, strict=True)
    ]


def predict_outputs(api: LayerApi, op, kind: str, inputs: list, post: list, n_out: int, knode=None) -> list:
    """The predicted output dtypes of a call from its post-autocast input dtypes (rule 2)."""
    n_out = max(n_out, 1)
    if kind == "op":
        return [_predict_op(api, op, post, knode)] * n_out
    compute = api.compute_dtype(op)
    if not post or any(_is_float(d) for d in post) or type(op).__name__ in FLOAT_PRODUCERS:
        return [compute] * n_out
    return [post[0]] * n_out  # only non-floating inputs: passed through


def _predict_op(api: LayerApi, op, post: list, knode):
    if api.keras3:
        if type(op).__name__ == "Cast" and getattr(op, "dtype", None) is not None:
            return _dt(op.dtype)
        known = KERAS3_OP_DTYPES.get(type(op).__name__)
        if known:
            return known
        floats = [d for d in post if _is_float(d)]
        if floats:
            return _promote(floats)
        return post[0] if post else None
    # tf_keras TF-op layer: an explicit dtype among the arguments wins.
    if knode is not None:
        args, kwargs = api.node_args(knode)
        for name in DTYPE_KWARGS:
            if name in (kwargs or {}) and kwargs[name] is not None and _looks_like_dtype(kwargs[name]):
                return _dt(kwargs[name])
        for arg in list(args or ())[1:]:
            if _looks_like_dtype(arg):
                return _dt(arg)
    symbol = str(getattr(op, "symbol", "") or "").rsplit(".", 1)[-1]
    if symbol in TF_OP_DTYPES:
        return TF_OP_DTYPES[symbol]
    return post[0] if post else None


def disagreement(api: LayerApi, node: dict, kind: str, post: list, predicted: list, observed: list) -> dict | None:
    """The graph's entry for a call whose predicted output dtypes differ from the observed ones: with a `reason` for
    an unpredictable one, without one for a mismatch (a bug in the rules); None when they agree."""
    if predicted == observed:
        return None
    entry = {"node": node["id"], "predicted": list(predicted), "observed": list(observed)}
    if kind in STRICT_KINDS:
        compute = node["compute_dtype"]
        if (
            api.keras3
            and kind == "builtin"
            and not any(_is_float(d) for d in post)
            and all(d == compute for d in observed)
        ):
            entry["reason"] = "keras3-symbolic"
        return entry
    entry["reason"] = kind
    return entry


def _looks_like_dtype(value) -> bool:
    return type(value).__name__ == "DType" or (
        isinstance(value, str) and (_is_float(value) or value.startswith(("int", "uint", "bool", "complex")))
    )


def _promote(floats):
    best = floats[0]
    for dtype in floats[1:]:
        if dtype == best:
            continue
        if {dtype, best} == {"float16", "bfloat16"}:
            best = "float32"
        elif _FLOAT_RANK.get(dtype, 0) > _FLOAT_RANK.get(best, 0):
            best = dtype
    return best
