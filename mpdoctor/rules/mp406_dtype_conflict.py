"""MP406 dtype-conflict-in-layer: user code that mixes its float16 compute dtype with hard-coded float32."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mpdoctor.diagnostics import Confidence, Diagnostic, Fix
from mpdoctor.facts.dtypes import LOW_PRECISION, compute_dtype
from mpdoctor.facts.op_dtypes import CAST, DEFAULT_FLOAT32, F16, F32, FOLLOW_FIRST, VALUE, WEIGHT_MAKERS
from mpdoctor.registry import (
    ExceptionVerdict,
    define_rule,
    exception_pattern,
    static_check,
    trace_check,
    verdict_of,
)
from mpdoctor.static.astutil import keyword_value
from mpdoctor.static.context import StaticContext
from mpdoctor.static.dataflow import flow_of, is_math, render, tensor_operands
from mpdoctor.static.float16_regions import Region, float16_regions
from mpdoctor.tf_messages import CANNOT_COMPUTE, DTYPE, FUNCTION_OP, dtype_name, is_precision_mismatch
from mpdoctor.tf_messages import cause as exception_cause
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts

define_rule(
    "MP406",
    "dtype-conflict-in-layer",
    "error",
    "ST",
    True,
    summary="Hard-coded float32 (constant, variable, random, cast, floatx) meets the float16 compute dtype.",
    what="""
        In float16 user code (a custom layer's `call` and its `self.` helpers, or a `Lambda` function), a value that
        is float32 by construction is combined, by an arithmetic operator or a TensorFlow / `keras.ops` op
        (`tf.add`, `tf.matmul`, `tf.concat`, `tf.where`, ...), with a tensor derived from the layer inputs,
        its weights or its sublayers, which are float16. The float32 value is one of:
        `tf.constant(v, dtype=tf.float32)` or `tf.constant(<float>)`; `tf.zeros/ones/eye/fill(...)`,
        `tf.random.normal/uniform/truncated_normal(...)`, `keras.random.*` or `keras.ops.zeros/ones/full` without
        `dtype` (they default to float32); a raw `tf.Variable` (created in `build`, `__init__` or `call`), which
        Keras never autocasts; `tf.cast(x, tf.float32)`; a cast to `self.dtype` (the VARIABLE dtype, float32 under
        `mixed_float16`); `K.floatx()` / `keras.config.floatx()` as a dtype (it stays "float32" when a mixed
        policy is set).

        `self.add_weight(..., dtype="float32")` is a conflict only under a pure `float16`/`bfloat16` policy: under
        `mixed_float16`/`mixed_bfloat16` both Keras 2 and Keras 3 autocast it to the compute dtype inside `call`
        (measured), so it is not flagged there.

        The finding is reported at the float32 value (the thing to change), naming the line where it meets float16.
        A float32 value that never meets a float16 tensor (deliberate float32 islands: cast in, compute, cast back)
        is not flagged; neither are outputs of sublayers built with `dtype="float32"`.
        """,
    why="""
        TensorFlow ops do not promote dtypes: under `mixed_float16`, `inputs * tf.constant(2.0, dtype=tf.float32)`,
        `inputs + tf.random.normal(tf.shape(inputs))`, `tf.concat([inputs, tf.zeros(...)], -1)`, a raw
        `tf.Variable` or a `tf.cast(x, tf.float32)` added to the inputs all raise InvalidArgumentError ("cannot
        compute Mul as input #1 was expected to be a half tensor but is a float tensor") in Keras 2 and Keras 3
        alike. The same code runs under float32, so it breaks only when mixed precision is switched on. Keras 3's
        `keras.ops` (`keras.ops.add`, `keras.ops.multiply`) and a Keras 3 float32 variable under a pure float16
        policy do not raise: they silently promote to float32, so the rest of the layer and its output run in
        float32 (measured).
        """,
    bad="""
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy("mixed_float16")

        class Noise(keras.layers.Layer):
            def call(self, inputs):
                noise = tf.random.normal(tf.shape(inputs))   # float32 by default
                return inputs + noise                        # float16 + float32: fails

        inputs = keras.Input((16,))
        x = Noise()(keras.layers.Dense(16)(inputs))
        model = keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(x))
        """,
    good="""
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy("mixed_float16")

        class Noise(keras.layers.Layer):
            def call(self, inputs):
                noise = tf.random.normal(tf.shape(inputs), dtype=self.compute_dtype)
                return inputs + noise

        inputs = keras.Input((16,))
        x = Noise()(keras.layers.Dense(16)(inputs))
        model = keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(x))
        """,
    fix="""
        Sets the dtype of the float32 value to the layer's compute dtype: `dtype=self.compute_dtype` in layer
        methods, `dtype=<first argument>.dtype` in a `Lambda` function; `K.floatx()` and `self.dtype` used as a
        dtype become `self.compute_dtype`. The edit of a `tf.cast(x, tf.float32)` or of a `tf.Variable` is marked
        unsafe (the float32 may have been deliberate: then cast the float16 side up instead, or make the variable
        an `add_weight`). `tf.fill` has no dtype argument and gets no automatic fix.
        """,
)


_COMBINATIONS = frozenset({ast.BinOp, ast.AugAssign, ast.Call})


def _combinations(ctx: StaticContext, region: Region) -> Iterator[tuple[ast.AST, list[ast.AST]]]:
    """Points where tensors meet: arithmetic operators and TF / keras.ops math calls, with their operands."""
    for node in ctx.scope_nodes_of(region.function, _COMBINATIONS):
        if isinstance(node, ast.BinOp) and not isinstance(
            node.op, (ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)
        ):
            yield node, [node.left, node.right]
        elif isinstance(node, ast.AugAssign):
            yield node, [node.target, node.value]
        elif isinstance(node, ast.Call):
            name = ctx.call_name(node)
            if name == "tf.convert_to_tensor" and node.args:
                # converting an existing float16 tensor to float32 raises ValueError ("Tensor conversion
                # requested dtype float32 for Tensor with dtype float16"): the call meets its own argument
                yield node, [node, node.args[0]]
                continue
            if is_math(name) and name not in CAST and name not in VALUE and name not in DEFAULT_FLOAT32:
                yield node, tensor_operands(name, node)


def _compute_dtype_expr(region: Region) -> str | None:
    if region.cls is not None:
        return "self.compute_dtype"
    first = region.first_param()
    return f"{first}.dtype" if first else None


def _mp406_fix(ctx: StaticContext, region: Region, origin: ast.AST) -> Fix | None:
    target = _compute_dtype_expr(region)
    if target is None or not isinstance(origin, ast.Call):
        return None
    name = ctx.call_name(origin)
    if isinstance(origin.func, ast.Attribute) and origin.func.attr in WEIGHT_MAKERS:
        return ctx.add_keyword_fix(
            origin, "dtype", "self.compute_dtype" if region.cls else target, "create the weight in the compute dtype"
        )
    if name in CAST:
        dtype = origin.args[1] if len(origin.args) > 1 else keyword_value(origin, "dtype")
        if dtype is None:
            return None
        return Fix(f"cast to `{target}` instead", (ctx.edit(dtype, target),), applicability="unsafe")
    if name in ("tf.fill", "keras.backend.constant") or name is None:
        return None
    if _math_on_numbers(name):
        return _cast_argument_fix(ctx, origin, name, target)
    if name == "tf.constant" and len(origin.args) > 1 and keyword_value(origin, "dtype") is None:
        return Fix(f"create it with dtype `{target}`", (ctx.edit(origin.args[1], target),))
    if name == "tf.Variable" and isinstance(origin.func, ast.Attribute):
        return _cast_initial_value_fix(ctx, origin, target)
    fix = ctx.add_keyword_fix(origin, "dtype", target, f"create it with dtype `{target}`")
    if name in ("tf.Variable", "keras.Variable"):
        return Fix(fix.description, fix.edits, applicability="unsafe")
    return fix


def _math_on_numbers(name: str | None) -> bool:
    """A math op that, on Python numbers, returns a float32 tensor (and takes no dtype)."""
    return is_math(name) and name not in VALUE and name not in DEFAULT_FLOAT32 and name not in FOLLOW_FIRST


def _cast_argument_fix(ctx: StaticContext, origin: ast.Call, name: str, target: str) -> Fix | None:
    """A math op on Python numbers: cast its argument (these ops take no dtype)."""
    if not origin.args or not isinstance(origin.func, ast.Attribute):
        return None
    func = ctx.segment(origin.func)
    if name.startswith("tf."):
        cast = func.split(".")[0] + ".cast"
    elif name.startswith("keras.ops."):
        cast = func.rsplit(".", 1)[0] + ".cast"
    else:
        return None
    arg = origin.args[0]
    return Fix(f"cast the argument to `{target}`", (ctx.edit(arg, f"{cast}({ctx.segment(arg)}, {target})"),))


def _cast_initial_value_fix(ctx: StaticContext, origin: ast.Call, target: str) -> Fix | None:
    """`tf.Variable(init)` -> `tf.Variable(tf.cast(init, target))`: dtype= alone fails ("Tensor conversion
    requested dtype float16 for Tensor with dtype float32")."""
    init = origin.args[0] if origin.args else keyword_value(origin, "initial_value")
    if init is None or keyword_value(origin, "dtype") is not None:
        return None
    cast = ctx.segment(origin.func).rsplit(".", 1)[0] + ".cast"
    return Fix(
        f"create it in `{target}`",
        (ctx.edit(init, f"{cast}({ctx.segment(init)}, {target})"),),
        applicability="unsafe",
    )


def _describe_origin(ctx: StaticContext, region: Region, origin: ast.AST) -> str:
    name = ctx.call_name(origin) if isinstance(origin, ast.Call) else None
    short = render(ctx, origin)
    if isinstance(origin, ast.Call) and isinstance(origin.func, ast.Attribute) and origin.func.attr in WEIGHT_MAKERS:
        return f"the float32 weight `{short}` (policy {region.low_policy} does not autocast it)"
    if name in CAST:
        return _describe_cast(region, origin, short)  # type: ignore[arg-type]
    if name in ("tf.Variable", "keras.Variable"):
        return f"the raw float32 variable `{short}` (Keras never autocasts it)"
    if _math_on_numbers(name):
        return f"`{short}` (a math op on Python numbers returns a float32 tensor)"
    dtype = keyword_value(origin, "dtype") if isinstance(origin, ast.Call) else None
    if isinstance(dtype, ast.Call):
        return f"`{short}` (floatx() stays float32 under {region.low_policy})"
    if dtype is None and name in DEFAULT_FLOAT32:
        return f"`{short}` (no dtype: float32 by default)"
    return f"the float32 value `{short}`"


def _describe_cast(region: Region, cast: ast.Call, short: str) -> str:
    dtype = cast.args[1] if len(cast.args) > 1 else keyword_value(cast, "dtype")
    if (
        isinstance(dtype, ast.Attribute)
        and dtype.attr in ("dtype", "variable_dtype", "_dtype")
        and isinstance(dtype.value, ast.Name)
        and dtype.value.id == "self"
    ):
        return f"`{short}` (self.dtype is the variable dtype, float32 under {region.low_policy})"
    if isinstance(dtype, ast.Call):
        return f"`{short}` (floatx() stays float32 under {region.low_policy})"
    return f"the float32 cast `{short}`"


ADVICE = "use self.compute_dtype (or the input's dtype) instead of a hard-coded float32"


def _promoted_silently(ctx: StaticContext, point: ast.AST, upcast: bool) -> bool:
    """Keras 3 promotes the meeting to float32 instead of raising: a keras.ops call, or a value it upcasts."""
    name = ctx.call_name(point) if isinstance(point, ast.Call) else None
    return (
        ctx.is_keras3
        and (bool(name and name.startswith("keras.ops.")) or upcast)
        and not (isinstance(point, (ast.BinOp, ast.AugAssign)) and not upcast)
    )


@static_check("MP406")
def check_dtype_conflicts(ctx: StaticContext) -> Iterable[Diagnostic]:
    reported: set[ast.AST] = set()
    for region in float16_regions(ctx):
        flow = flow_of(ctx, region)
        low = compute_dtype(region.low_policy)
        for point, operands in _combinations(ctx, region):
            kinds = [flow.kind(o) for o in operands]
            f32 = [k for k in kinds if k.kind == F32 and k.origin is not None]
            if not f32 or not any(k.kind == F16 for k in kinds):
                continue
            origin = f32[0].origin
            if origin in reported:
                continue
            reported.add(origin)
            upcast = _promoted_silently(ctx, point, f32[0].upcast)
            effect = (
                f"Keras 3 silently promotes the result to float32, so {region.where} stops computing in {low}"
                if upcast
                else f"TensorFlow raises a dtype mismatch (expected {'half' if low == 'float16' else low}, got float)"
            )
            line = f"on line {point.lineno}" if point.lineno != origin.lineno else "there"
            message = (
                f"{_describe_origin(ctx, region, origin)} meets the {low} tensors of {region.where} {line}: {effect}"
            )
            message += f"; {ADVICE}"
            yield ctx.diagnostic(
                "MP406",
                origin,
                message,
                confidence=Confidence.HIGH if not upcast else Confidence.MEDIUM,
                fix=_mp406_fix(ctx, region, origin),
            )


@trace_check("MP406")
def trace_dtype_conflict(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    """The run raised a float16/float32 mismatch ("expected half but is float"). One finding per root cause: when
    the static pass names the float32 value in the layer whose call raised, the run confirms that finding (same
    place, so the engine merges the two); else it is reported on the class of that layer (when it is defined in
    this file), else at the raising line, quoting the cause TensorFlow names."""
    exception = facts.exception
    verdict = verdict_of(exception)
    if exception is None or not isinstance(verdict, DtypeConflictVerdict):
        return []
    record = facts.layer(exception.layer_uid)
    cause = exception_cause(exception.type, exception.message)
    cls = ctx.static.classes.get(record.class_name) if record and ctx.static else None
    static = _static_findings_in(ctx, cls, exception.location.line if exception.location else None)
    if static:
        note = f"the trace confirmed it: the model raised {exception.type or 'an exception'}: {cause}"
        return [replace(d, passes=("trace",), notes=(*d.notes, note)) for d in static]
    where = ctx.at_line(cls.lineno) if cls is not None else exception.location
    name = f"layer `{record.class_name}`" if record else "a layer"
    low = record.compute_dtype if record and record.compute_dtype in ("float16", "bfloat16") else "float16"
    op = f" in {verdict.op}" if verdict.op else ""
    return [
        ctx.diagnostic(
            "MP406",
            where,
            f"a float32 value meets the {low} tensors of {name}{op}: the model raised when it ran ({cause}); {ADVICE}",
            layer=record.name if record else None,
        )
    ]


def _static_findings_in(ctx: TraceContext, cls: ast.ClassDef | None, line: int | None) -> list[Diagnostic]:
    """The static MP406 findings inside the class of the layer that raised: the one at the raising line if there
    is one (the value and the meeting on one line), else all of them."""
    if cls is None or ctx.static is None:
        return []
    inside = [
        d for d in check_dtype_conflicts(ctx.static) if cls.lineno <= d.location.line <= (cls.end_lineno or cls.lineno)
    ]
    at_line = [d for d in inside if d.location.line == line]
    return at_line or inside


# ---------------------------------------------------------------- what TensorFlow says when it happens

_INPUT_OF_OP = re.compile(
    rf"Input '(\w+)' of '(\w+)' Op has type ({DTYPE}) that does not match type "
    rf"({DTYPE}) of argument '(\w+)'"
)
_LIST_OF_OP = re.compile(
    r"Tensors in list passed to '(\w+)' of '(\w+)' Op have types \[([^\]]*)\] "
    r"that don't all match"
)
_CONVERSION = re.compile(
    rf"(?:(\w+): )?Tensor conversion requested dtype ({DTYPE}) for Tensor with dtype "
    rf"({DTYPE})"
)
# tf.experimental.numpy / math_ops dtype checks: "`x` and `y` must have the same dtype, got tf.float16 != tf.float32."
_SAME_DTYPE = re.compile(rf"must have the same dtype, got ({DTYPE}) != ({DTYPE})")
_LOOSE_EXPECTED = re.compile(
    rf"\bexpected (?:an? )?({DTYPE}) (?:tensor )?but (?:is|got|received) (?:an? )?"
    rf"({DTYPE})\b"
)


@dataclass(frozen=True, kw_only=True)
class DtypeConflictVerdict(ExceptionVerdict):
    op: str | None  # "Mul"
    expected: str | None  # "float16"
    received: str | None  # "float32"
    pattern: str  # which message
    input: str | None = None  # the op's input and argument names
    argument: str | None = None
    input_index: int | None = None
    dtypes: list[str | None] | None = None  # list inputs such as ConcatV2's


def _mp406(op: str | None, expected: str, received: str, pattern: str, **extra: Any) -> DtypeConflictVerdict | None:
    expected_name, received_name = dtype_name(expected), dtype_name(received)
    if not is_precision_mismatch(received_name, [expected_name]):
        return None
    return DtypeConflictVerdict(op=op, expected=expected_name, received=received_name, pattern=pattern, **extra)


@exception_pattern("MP406", order=40)
def dtype_conflict_message(message: str) -> DtypeConflictVerdict | None:
    """float16/bfloat16 meets float32 inside one op of a layer."""
    match = CANNOT_COMPUTE.search(message)
    if match and not FUNCTION_OP.search(match.group(1)):
        return _mp406(match.group(1), match.group(3), match.group(4), "cannot_compute", input_index=int(match.group(2)))
    match = _INPUT_OF_OP.search(message)
    if match:
        return _mp406(
            match.group(2),
            match.group(4),
            match.group(3),
            "input_type_mismatch",
            input=match.group(1),
            argument=match.group(5),
        )
    match = _LIST_OF_OP.search(message)
    if match:
        dtypes = [dtype_name(part) for part in match.group(3).split(",") if part.strip()]
        low = [dtype for dtype in dtypes if dtype in LOW_PRECISION]
        other = [dtype for dtype in dtypes if dtype not in LOW_PRECISION]
        if low and other:
            return _mp406(match.group(2), low[0], other[0], "list_types_mismatch", input=match.group(1), dtypes=dtypes)
        return None
    match = _CONVERSION.search(message)
    if match:
        argument = match.group(1)
        if argument and argument.endswith(("Error", "Exception")):  # "ValueError: Tensor conversion ..."
            argument = None
        return _mp406(None, match.group(2), match.group(3), "tensor_conversion", argument=argument)
    match = _SAME_DTYPE.search(message)
    if match:
        return _mp406(None, match.group(1), match.group(2), "same_dtype_check")
    match = _LOOSE_EXPECTED.search(message)
    if match:
        return _mp406(None, match.group(1), match.group(2), "expected_but")
    return None
