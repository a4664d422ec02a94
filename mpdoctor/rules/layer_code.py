"""MP403, MP406, MP407: numerics and dtypes inside USER code that runs in float16.

"User code that runs in float16" is the `call` of a local Layer/Model subclass (and the `self.helper(...)` methods
it calls) whose instances compute in float16/bfloat16, and the function or lambda given to a `keras.layers.Lambda`
layer whose policy computes in float16/bfloat16. Built-in Keras layers are never looked into: LayerNormalization,
BatchNormalization, Softmax... compute their numerically sensitive parts in float32 internally.

The checks share two private analyses:
- `_float16_regions(ctx)`: the function bodies above, each with the policies it computes under and how its
  parameters arrive (autocast to the compute dtype or not);
- `_Flow`: a small per-function, straight-line dtype analysis that classifies an expression as float16-derived
  (from the autocast inputs, the layer's weights, sublayer outputs), provably float32 (a `tf.cast(x, tf.float32)`,
  a `tf.constant(..., dtype=tf.float32)`, a `tf.random.normal` without dtype, ...), an int/bool tensor, a Python
  number, or unknown. Findings are raised only on what the analysis can show; unknown stays quiet.
"""

from __future__ import annotations

import ast
import struct
import weakref
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from mpdoctor.diagnostics import Confidence, Diagnostic, Fix
from mpdoctor.registry import define_rule, static_check, trace_check
from mpdoctor.static.astutil import contains
from mpdoctor.static.astutil import keyword_value
from mpdoctor.static.context import FUNCTION_NODES, StaticContext
from mpdoctor.static.policies import compute_dtype, is_float16_compute
from mpdoctor.trace.context import TraceContext
from mpdoctor.trace.facts import exception_verdict, first_message_line, layer_record

define_rule(
    "MP403", "float16-unsafe-constant", "error", "ST", True,
    summary="A literal that float16 cannot represent (-1e9, 1e-12) is used in float16 user code.",
    what="""
        A float literal that float16 cannot hold is used in the float16 computation of your own code: the `call`
        of a custom Layer/Model (and the `self.` helper methods it calls) or a function given to
        `keras.layers.Lambda`, when that layer computes in float16 (`mixed_float16` or `float16`, globally or via
        `dtype=`). Float16 overflows above 65504 (`-1e9`, `1e10`, `-1e5` become -inf/inf) and flushes nonzero
        values below 5.96e-8 to zero (`1e-9`, `1e-12` become 0).

        Flagged: the literal as an operand of arithmetic with a float16 tensor (`scores + (1.0 - mask) * -1e9`),
        or as an argument of TensorFlow / `keras.ops` math on one (`tf.where(m, x, -1e9)`,
        `tf.maximum(var, 1e-12)`, `tf.constant(-1e9, dtype=x.dtype)`). A literal reached through a name is
        reported where it is defined, with the line that uses it: a module constant (`NEG_INF = -1e9`), a local
        variable, `self.eps = 1e-12`, or a parameter default stored on self (`def __init__(self, eps=1e-12)`).

        Not flagged: arguments of built-in Keras layers (`LayerNormalization(epsilon=1e-12)`,
        `BatchNormalization(epsilon=...)`, even when built inside a custom layer), since they compute their
        statistics in float32; code that provably computes in float32 (the other operand is
        `tf.cast(x, tf.float32)` or a name assigned from it, `tf.constant(..., dtype=tf.float32)`); layers whose
        instances all use `dtype="float32"`; large values used only as a clipping bound (`tf.maximum(x, -1e9)` is
        still `x` when -1e9 becomes -inf); `float("-inf")` and `-np.inf`, which float16 represents.
        bfloat16 has float32's exponent range (max ~3.4e38, smallest normal ~1.2e-38), so `mixed_bfloat16` and
        `bfloat16` are never flagged.

        The static pass follows names within a function (straight-line), module constants and `self.` attributes;
        a value passed in from another function or file is not followed. Uses whose other operand is a tensor of
        unknown dtype (a non-first `call` argument under Keras 2, a helper's parameter) get medium confidence.

        Trace form: the layers of the model that compute in float16 and are defined in your file are traced into
        a graph with the float16 inputs they received on the sample batch. A finding whose use line holds the
        value as -inf/inf/0 in that graph is confirmed (passes static+trace); one whose use lines all compute in
        float32 there (e.g. after a cast the static pass could not see) is downgraded to info, with the reason.
        A literal on a line of that graph that becomes inf/0 in float16 and that the static pass did not follow is
        reported by the trace alone.
        """,
    why="""
        Python floats are converted to the tensor's dtype when they meet a float16 tensor: `tf.cast(-1e9,
        tf.float16)` is -inf. A mask `-1e9 * (1 - mask)` then gives `0 * -inf = NaN` where the mask is 1, and the
        softmax of a row containing NaN is NaN everywhere (measured: a custom layer returning
        `inputs + (1.0 - mask) * -1e9` under `mixed_float16` outputs NaN and -inf). An epsilon that flushes to zero
        no longer protects anything: `tf.math.rsqrt(var + 1e-12)` on a zero-variance row is `rsqrt(0) = inf` and
        the normalized output is NaN, while the built-in `LayerNormalization(epsilon=1e-12)` stays finite.
        """,
    bad="""
        tf.keras.mixed_precision.set_global_policy("mixed_float16")

        class MaskedSoftmax(tf.keras.layers.Layer):
            def call(self, scores, mask):
                scores += (1.0 - tf.cast(mask, scores.dtype)) * -1e9   # -inf in float16 -> NaN
                return tf.nn.softmax(scores)

        class RMSNorm(tf.keras.layers.Layer):
            def call(self, x):
                var = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)
                return x * tf.math.rsqrt(var + 1e-12)                    # 1e-12 is 0 in float16
        """,
    good="""
        class MaskedSoftmax(tf.keras.layers.Layer):
            def call(self, scores, mask):
                scores += (1.0 - tf.cast(mask, scores.dtype)) * -1e4   # finite in float16, exp() is still 0
                return tf.nn.softmax(scores)

        class RMSNorm(tf.keras.layers.Layer):
            def call(self, x):
                x32 = tf.cast(x, tf.float32)                            # or: compute the statistics in float32
                var = tf.reduce_mean(tf.square(x32), axis=-1, keepdims=True)
                return tf.cast(x32 * tf.math.rsqrt(var + 1e-12), x.dtype)
        """,
    fix="""
        Replaces a large negative literal by `-1e4` (finite in float16 with room for the scores it is added to,
        and `exp(-1e4)` is exactly 0, so softmax masks behave as before) and a tiny epsilon by `1e-7` (the value of
        `keras.backend.epsilon()`, a nonzero float16 subnormal, ~1.2e-7). Inside a custom layer's method (after
        `super().__init__` in `__init__`) or a Lambda the value is chosen from the dtype, so float32 code keeps its
        constant: `(-1e4 if self.compute_dtype == "float16" else -1e9)` / `t.dtype` (a safe fix). Elsewhere (module
        constants, default arguments) the plain replacement changes the number everywhere: marked unsafe, review
        it. `-65504` (`tf.float16.min`) is NOT used, because adding it to a negative score overflows again. Where an epsilon divides (`x / (norm + eps)`), prefer `1e-4` or up, since `1 / 1e-7`
        overflows float16; where you need the exact value, compute that part in float32 instead (cast in, cast
        out). Large positive literals get no automatic fix.
        """,
)

define_rule(
    "MP406", "dtype-conflict-in-layer", "error", "ST", True,
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
        tf.keras.mixed_precision.set_global_policy("mixed_float16")

        class NoisyScale(tf.keras.layers.Layer):
            def build(self, input_shape):
                self.scale = tf.Variable(tf.ones(input_shape[-1:]))              # raw float32 variable
            def call(self, inputs):
                noise = tf.random.normal(tf.shape(inputs))                      # float32 by default
                return (inputs + noise) * self.scale * tf.constant(0.5, dtype=tf.float32)
        """,
    good="""
        class NoisyScale(tf.keras.layers.Layer):
            def build(self, input_shape):
                self.scale = self.add_weight(name="scale", shape=input_shape[-1:], initializer="ones")
            def call(self, inputs):
                noise = tf.random.normal(tf.shape(inputs), dtype=inputs.dtype)
                return (inputs + noise) * self.scale * tf.constant(0.5, dtype=self.compute_dtype)
        """,
    fix="""
        Sets the dtype of the float32 value to the layer's compute dtype: `dtype=self.compute_dtype` in layer
        methods, `dtype=<first argument>.dtype` in a `Lambda` function; `K.floatx()` and `self.dtype` used as a
        dtype become `self.compute_dtype`. The edit of a `tf.cast(x, tf.float32)` or of a `tf.Variable` is marked
        unsafe (the float32 may have been deliberate: then cast the float16 side up instead, or make the variable
        an `add_weight`). `tf.fill` has no dtype argument and gets no automatic fix.
        """,
)

define_rule(
    "MP407", "unsafe-op-in-float16", "warning", "ST", False,
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
        class GatedPool(tf.keras.layers.Layer):
            def call(self, x):
                weights = tf.exp(x)                                   # inf once x > 11
                return tf.reduce_sum(x * weights, axis=1) / tf.reduce_sum(weights, axis=1)
        """,
    good="""
        class GatedPool(tf.keras.layers.Layer):
            def call(self, x):
                x32 = tf.cast(x, tf.float32)                          # run the sensitive part in float32
                weights = tf.nn.softmax(x32, axis=1)
                return tf.cast(tf.reduce_sum(x32 * weights, axis=1), x.dtype)
        """,
    fix="""
        No autofix: cast the operand to float32 for the sensitive op and cast the result back to the compute dtype
        (`tf.cast(..., x.dtype)`), or use a stable formulation (softmax / logsumexp instead of exp and sum).
        """,
)

# ---------------------------------------------------------------------------------------------- dtype kinds

F16 = "f16"  # derived from the float16 compute dtype (autocast inputs, weights, sublayer outputs)
F32 = "f32"  # provably float32
TENSOR = "tensor"  # a tensor of unknown float dtype (non-autocast argument, helper parameter)
INT = "int"  # int/bool tensors, shapes
CONST = "const"  # Python numbers and other non-tensors
_RANK = {F32: 4, F16: 3, TENSOR: 2, INT: 1, CONST: 0}

_OVERFLOW = "overflow"
_UNDERFLOW = "underflow"

_CAST = {"tf.cast", "tf.dtypes.cast", "tf.saturate_cast", "keras.ops.cast", "keras.backend.cast"}
# value constructors: their dtype defaults to the value's (float32 for a Python float).
_VALUE = {"tf.constant", "tf.convert_to_tensor", "tf.Variable", "keras.ops.convert_to_tensor", "keras.Variable",
          "keras.backend.constant", "keras.backend.variable", "tf.fill", "keras.ops.full"}
# creators whose dtype defaults to float32 / floatx when not given.
_DEFAULT_FLOAT32 = {
    "tf.zeros", "tf.ones", "tf.eye", "tf.random.normal", "tf.random.uniform", "tf.random.truncated_normal",
    "tf.random.stateless_normal", "tf.random.stateless_uniform", "tf.random.stateless_truncated_normal",
    "keras.random.normal", "keras.random.uniform", "keras.random.truncated_normal", "keras.ops.zeros",
    "keras.ops.ones", "keras.ops.eye", "keras.backend.zeros", "keras.backend.ones", "keras.backend.eye",
    "keras.backend.random_normal", "keras.backend.random_uniform", "keras.backend.truncated_normal",
}
_FOLLOW_FIRST = {"tf.zeros_like", "tf.ones_like", "keras.ops.zeros_like", "keras.ops.ones_like",
                 "keras.backend.zeros_like", "keras.backend.ones_like", "tf.identity", "tf.stop_gradient"}
_INT_RESULT = {"shape", "size", "rank", "argmax", "argmin", "equal", "not_equal", "greater", "greater_equal",
               "less", "less_equal", "logical_and", "logical_or", "logical_not", "is_nan", "is_inf", "is_finite",
               "isnan", "isinf", "isfinite", "range", "arange", "sequence_mask", "one_hot", "top_k", "int_shape",
               "ndim", "count_nonzero", "where_v1"}
_NOT_MATH_PREFIXES = ("tf.print", "tf.debugging.", "tf.summary.", "tf.TensorShape", "tf.function", "tf.keras.",
                      "tf.io.", "tf.data.", "tf.config.", "tf.saved_model.", "tf.train.", "tf.compat.",
                      "tf.GradientTape", "tf.name_scope", "tf.device", "keras.backend.floatx",
                      "keras.backend.epsilon")
_MATH_PREFIXES = ("tf.", "keras.ops.", "keras.backend.")
_BOUNDS = {"maximum", "minimum", "clip_by_value", "clip"}
_FLOATX = {"keras.backend.floatx", "keras.config.floatx"}
_WEIGHT_MAKERS = {"add_weight", "add_variable"}
_SHAPE_ATTRS = {"shape", "ndim", "dtype", "name", "rank"}


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _is_math(name: str | None) -> bool:
    return bool(name) and name.startswith(_MATH_PREFIXES) and not name.startswith(_NOT_MATH_PREFIXES)


def _combine(*kinds: str | None) -> str | None:
    known = [k for k in kinds if k is not None]
    if not known:
        return None
    if len(known) < len(kinds) and max(_RANK[k] for k in known) < _RANK[TENSOR]:
        return None  # a number combined with something unknown: unknown
    return max(known, key=lambda k: _RANK[k])


@dataclass(frozen=True)
class Kind:
    kind: str | None
    origin: ast.AST | None = None  # for F32: the node that made it float32 (what MP406 reports)
    upcast: bool = False  # Keras 3 keras.ops / KerasVariable: promotes instead of raising


_UNKNOWN = Kind(None)


def _join(kinds: Iterable[Kind]) -> Kind:
    """The kind of an op's result. float32 meeting float16 raises in TF (MP406 reports it); once that is fixed the
    result is float16, so the mix counts as float16 and later uses are judged as such."""
    kinds = list(kinds)
    if any(k.kind == F32 for k in kinds) and any(k.kind == F16 for k in kinds):
        return Kind(F16)
    best = _combine(*(k.kind for k in kinds))
    if best is None:
        return _UNKNOWN
    for k in kinds:
        if k.kind == best:
            return k if best == F32 else Kind(best)
    return Kind(best)


# ---------------------------------------------------------------------------------------------- regions


@dataclass
class _Region:
    """One function body of user code that runs in float16."""

    function: ast.AST  # FunctionDef or Lambda
    cls: ast.ClassDef | None
    owner: str  # "layer `Foo`" or "the Lambda layer on line 12"
    role: str  # "call", "helper" or "lambda"
    policies: frozenset
    params: dict[str, str] = field(default_factory=dict)

    @property
    def float16_policy(self) -> str | None:
        low = sorted(p for p in self.policies if compute_dtype(p) == "float16")
        return low[0] if low else None

    @property
    def low_policy(self) -> str:
        return sorted(p for p in self.policies if is_float16_compute(p))[0]

    @property
    def pure(self) -> bool:
        """Some low-precision policy also makes the VARIABLES low precision (`float16`, `bfloat16`)."""
        return any(p in ("float16", "bfloat16") for p in self.policies)

    @property
    def mixed_only(self) -> bool:
        low = [p for p in self.policies if is_float16_compute(p)]
        return bool(low) and all(p.startswith("mixed_") for p in low)

    @property
    def where(self) -> str:
        name = getattr(self.function, "name", None)
        if self.role == "lambda":
            return self.owner
        return f"`{name}` of {self.owner}"

    def first_param(self) -> str | None:
        args = self.function.args  # type: ignore[attr-defined]
        names = [a.arg for a in [*args.posonlyargs, *args.args]]
        if self.cls is not None and names:
            names = names[1:]
        return names[0] if names else None


_REGIONS: "weakref.WeakKeyDictionary[StaticContext, list[_Region]]" = weakref.WeakKeyDictionary()


def _float16_regions(ctx: StaticContext) -> list[_Region]:
    """Function bodies of user code computing under a float16/bfloat16 policy, each listed once."""
    if ctx in _REGIONS:
        return _REGIONS[ctx]
    regions: dict[ast.AST, _Region] = {}
    keras3 = ctx.is_keras3
    for name, cls in ctx.custom_layer_classes.items():
        policies = ctx.class_policies(name)
        if not any(is_float16_compute(p) for p in policies):
            continue
        methods = {s.name: s for s in cls.body if isinstance(s, FUNCTION_NODES)}
        if "call" not in methods:
            continue
        kind = "model" if ctx.is_custom_model(cls) else "layer"
        owner = f"{kind} `{name}`"
        todo = [(methods["call"], "call")]
        while todo:
            fn, role = todo.pop()
            if fn in regions:
                continue
            region = _Region(fn, cls, owner, role, policies)
            region.params = _param_kinds(fn, skip_self=True, role=role, keras3=keras3)
            regions[fn] = region
            for node in ctx.walk_scope(fn):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"
                        and node.func.attr in methods and node.func.attr not in ("call", "build", "__init__")):
                    todo.append((methods[node.func.attr], "helper"))
    for lc in ctx.layer_calls:
        if lc.qualname != "keras.layers.Lambda":
            continue
        policies = ctx.layer_policies(lc)
        if not any(is_float16_compute(p) for p in policies):
            continue
        fn_expr = lc.node.args[0] if lc.node.args else next(
            (k.value for k in lc.node.keywords if k.arg == "function"), None)
        fn = _function_of(ctx, fn_expr)
        if fn is None:
            continue
        if fn in regions:
            regions[fn].policies = regions[fn].policies | policies
            continue
        region = _Region(fn, None, f"the function of the Lambda layer on line {lc.node.lineno}", "lambda", policies)
        region.params = _param_kinds(fn, skip_self=False, role="lambda", keras3=keras3)
        regions[fn] = region
    result = list(regions.values())
    _REGIONS[ctx] = result
    return result


def _function_of(ctx: StaticContext, expr: ast.AST | None) -> ast.AST | None:
    if isinstance(expr, ast.Lambda):
        return expr
    if isinstance(expr, ast.Name):
        defs = [n for n in ctx.nodes if isinstance(n, FUNCTION_NODES) and n.name == expr.id]
        if len(defs) == 1:
            return defs[0]
    return None


def _param_kinds(fn: ast.AST, *, skip_self: bool, role: str, keras3: bool) -> dict[str, str]:
    """How each parameter arrives: the first `call` / Lambda argument is autocast to the compute dtype (Keras 2
    casts only that one; Keras 3 casts every floating tensor argument)."""
    args = fn.args  # type: ignore[attr-defined]
    positional = [*args.posonlyargs, *args.args]
    if skip_self and positional:
        positional = positional[1:]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    kinds: dict[str, str] = {}
    for index, (arg, default) in enumerate(zip(positional, defaults)):
        if isinstance(default, ast.Constant) and isinstance(default.value, (bool, int, float, str)):
            kinds[arg.arg] = CONST
        elif arg.arg == "training":
            kinds[arg.arg] = CONST
        elif index == 0 and role in ("call", "lambda"):
            kinds[arg.arg] = F16
        elif role == "call" and keras3:
            kinds[arg.arg] = F16
        elif role == "lambda":
            kinds[arg.arg] = CONST  # Lambda(arguments={...}) values
        else:
            kinds[arg.arg] = TENSOR
    for arg in args.kwonlyargs:
        kinds[arg.arg] = CONST if arg.arg == "training" else TENSOR
    return kinds


# ---------------------------------------------------------------------------------------------- per-function flow


class _Flow:
    """Straight-line dtype kinds of the expressions of one region function."""

    def __init__(self, ctx: StaticContext, region: _Region):
        self.ctx = ctx
        self.region = region
        self.fn = region.function
        self.assignments: dict[str, list[tuple[tuple[int, int], ast.AST, ast.AST]]] = {}
        self._memo: dict[int, Kind] = {}
        self._busy: set[int] = set()
        if isinstance(self.fn, FUNCTION_NODES):
            for node in ctx.walk_scope(self.fn):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        self._record(target, node.value, node)
                elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                    self._record(node.target, node if isinstance(node, ast.AugAssign) else node.value, node)
                elif isinstance(node, ast.For):
                    self._record(node.target, None, node)
                elif isinstance(node, ast.comprehension):
                    self._record(node.target, None, node.target)
                elif isinstance(node, ast.NamedExpr):
                    self._record(node.target, node.value, node)

    def _record(self, target: ast.AST, value: ast.AST | None, stmt: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self.assignments.setdefault(target.id, []).append(((stmt.lineno, stmt.col_offset), value, stmt))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._record(element.value if isinstance(element, ast.Starred) else element, value, stmt)

    def binding(self, name: ast.Name) -> tuple[ast.AST | None, bool]:
        """(value assigned last before `name`, whether the name is local to the function at all)."""
        found = self.assignments.get(name.id)
        if not found:
            return None, name.id in self.region.params
        position = (name.lineno, name.col_offset)
        before = [entry for entry in found if entry[0] < position and not _inside(name, entry[2])]
        if not before:
            return None, True
        return max(before, key=lambda entry: entry[0])[1], True

    # -------------------------------------------------------------- kinds

    def kind(self, expr: ast.AST | None) -> Kind:
        if expr is None:
            return _UNKNOWN
        key = id(expr)
        if key in self._memo:
            return self._memo[key]
        if key in self._busy:
            return _UNKNOWN
        self._busy.add(key)
        try:
            result = self._kind(expr)
        finally:
            self._busy.discard(key)
        self._memo[key] = result
        return result

    def _kind(self, expr: ast.AST) -> Kind:
        ctx = self.ctx
        if isinstance(expr, ast.Constant):
            return Kind(CONST) if isinstance(expr.value, (int, float, complex)) else _UNKNOWN
        if isinstance(expr, ast.Name):
            value, local = self.binding(expr)
            if value is not None:
                if isinstance(value, ast.AugAssign):
                    return _join([self._aug_prior(expr, value), self.kind(value.value)])
                return self.kind(value)
            if local:
                return Kind(self.region.params.get(expr.id)) if expr.id in self.region.params else _UNKNOWN
            const = ctx.module_constants.get(expr.id)
            if isinstance(const, (ast.Constant, ast.UnaryOp)) and _number(const) is not None:
                return Kind(CONST)
            return _UNKNOWN
        if isinstance(expr, ast.UnaryOp):
            return Kind(INT) if isinstance(expr.op, ast.Not) else self.kind(expr.operand)
        if isinstance(expr, ast.BinOp):
            return _join([self.kind(expr.left), self.kind(expr.right)])
        if isinstance(expr, (ast.Compare, ast.BoolOp)):
            return Kind(INT)
        if isinstance(expr, ast.IfExp):
            return _join([self.kind(expr.body), self.kind(expr.orelse)])
        if isinstance(expr, ast.Subscript):
            inner = self.kind(expr.value)
            return inner if inner.kind in (F16, F32, TENSOR, INT) else _UNKNOWN
        if isinstance(expr, ast.Attribute):
            if expr.attr in _SHAPE_ATTRS:
                return Kind(CONST)
            if isinstance(expr.value, ast.Name) and expr.value.id == "self":
                return self._self_attribute(expr)
            return _UNKNOWN
        if isinstance(expr, ast.Call):
            return self._call_kind(expr)
        return _UNKNOWN

    def _aug_prior(self, use: ast.Name, stmt: ast.AugAssign) -> Kind:
        fake = ast.Name(id=use.id, ctx=ast.Load())
        fake.lineno, fake.col_offset = stmt.lineno, stmt.col_offset
        return self.kind(fake)

    def _self_attribute(self, expr: ast.Attribute) -> Kind:
        value = self.ctx.self_attribute(expr, expr.attr) if self.region.cls is not None else None
        if value is None:
            return _UNKNOWN
        if _number(value) is not None:
            return Kind(CONST)
        if isinstance(value, ast.Call):
            func = value.func
            if (isinstance(func, ast.Attribute) and func.attr in _WEIGHT_MAKERS and isinstance(func.value, ast.Name)
                    and func.value.id == "self"):
                dtype = keyword_value(value, "dtype")
                cls = self.dtype_class(dtype) if dtype is not None else None
                if cls == INT:
                    return Kind(INT)
                if cls == F32 and self.region.pure:
                    # no autocast under a pure float16 policy (variable dtype == compute dtype)
                    return Kind(F32, value, upcast=self.ctx.is_keras3)
                return Kind(F16)  # autocast to the compute dtype inside call
            name = self.ctx.call_name(value)
            if name in ("tf.Variable", "keras.Variable"):
                kind = self._call_kind(value, outside=True)
                return kind
            if name in _VALUE or name in _DEFAULT_FLOAT32 or name in _CAST:
                return self._call_kind(value, outside=True)
        return _UNKNOWN

    def _outside_kind(self, value: ast.AST | None) -> Kind:
        """Kind of a value written in build/__init__ (no flow there: literals and dtype-explicit creators)."""
        if _is_float_literal(value):
            return Kind(F32)
        if isinstance(value, ast.Constant) and isinstance(value.value, int):
            return Kind(INT)
        if isinstance(value, ast.Call):
            name = self.ctx.call_name(value)
            if name in _VALUE or name in _DEFAULT_FLOAT32 or name in _CAST:
                dtype = keyword_value(value, "dtype")
                if dtype is None and name in _CAST and len(value.args) > 1:
                    dtype = value.args[1]
                if dtype is not None:
                    cls = self.dtype_class(dtype)
                    return Kind(cls) if cls else _UNKNOWN
                if name in _DEFAULT_FLOAT32:
                    return Kind(F32)
        return _UNKNOWN

    def dtype_class(self, expr: ast.AST | None) -> str | None:
        """F32 / F16 / INT for a dtype expression, None when unknown."""
        if expr is None:
            return None
        ctx = self.ctx
        if isinstance(expr, ast.Call) and ctx.call_name(expr) in _FLOATX:
            if any(True for _ in ctx.calls_named("keras.backend.set_floatx", "keras.config.set_floatx")):
                return None
            return F32
        if isinstance(expr, ast.Attribute):
            if isinstance(expr.value, ast.Name) and expr.value.id == "self":
                if expr.attr in ("compute_dtype", "_compute_dtype"):
                    return F16
                if expr.attr in ("dtype", "variable_dtype", "_dtype"):
                    return F32 if self.region.mixed_only else (F16 if not self.region.mixed_only and
                                                               self.region.pure else None)
            if expr.attr == "compute_dtype":
                return F16
            if expr.attr == "dtype":
                inner = self.kind(expr.value)
                return inner.kind if inner.kind in (F16, F32) else None
        if isinstance(expr, ast.Name):
            value, local = self.binding(expr)
            if value is not None and not isinstance(value, ast.AugAssign):
                return self.dtype_class(value)
        text = None
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            text = expr.value
        else:
            resolved = ctx.resolve(expr)
            if resolved and resolved.startswith(("tf.", "np.")):
                text = _short(resolved)
        if text:
            if text in ("float32", "float64", "float", "double"):
                return F32
            if text in ("float16", "half"):
                return F16
            if text.startswith(("int", "uint", "bool")):
                return INT
        return None

    def _call_kind(self, call: ast.Call, outside: bool = False) -> Kind:
        ctx = self.ctx
        name = ctx.call_name(call)
        if name is None:
            layer = ctx.layer_instance(call.func)
            if layer is not None:
                policies = ctx.layer_policies(layer)
                if policies and all(p in ("float32", "float64") for p in policies):
                    return Kind(F32)  # deliberate float32 sublayer: provably float32, not reported
                if any(is_float16_compute(p) for p in policies):
                    return Kind(F16)
                return _UNKNOWN
            if isinstance(call.func, ast.Name) and call.func.id in ("len", "int", "range"):
                return Kind(CONST)
            if isinstance(call.func, ast.Name) and call.func.id == "float":
                return Kind(CONST)
            return _UNKNOWN
        short = _short(name)
        if name in _CAST:
            dtype = call.args[1] if len(call.args) > 1 else keyword_value(call, "dtype")
            cls = self.dtype_class(dtype)
            if cls == F32:
                return Kind(F32, call)
            if cls in (F16, INT):
                return Kind(cls)
            return Kind(TENSOR)
        if name in _VALUE or name in _DEFAULT_FLOAT32:
            dtype = keyword_value(call, "dtype")
            if dtype is None and name in ("tf.constant", "tf.convert_to_tensor", "tf.Variable") and len(call.args) > 1:
                dtype = call.args[1] if name != "tf.Variable" else None
            if dtype is not None:
                cls = self.dtype_class(dtype)
                return Kind(cls, call if cls == F32 else None) if cls else Kind(TENSOR)
            if name in _DEFAULT_FLOAT32:
                return Kind(F32, call)
            value = call.args[-1] if name in ("tf.fill", "keras.ops.full") and call.args else (
                call.args[0] if call.args else keyword_value(call, "initial_value") or keyword_value(call, "value"))
            inner = self.kind(value) if not outside else self._outside_kind(value)
            if _is_float_literal(value):
                return Kind(F32, call)
            if name in ("tf.Variable", "keras.Variable") and inner.kind in (None, TENSOR, CONST):
                # a raw variable takes its initial value's dtype: initializers, tf.ones/zeros, tf.random.* and
                # Python floats all default to float32 (a float64 NumPy array also conflicts)
                return Kind(F32, call)
            if inner.kind == F32:
                return Kind(F32, call if name in ("tf.Variable", "keras.Variable") else inner.origin or call)
            return Kind(inner.kind) if inner.kind in (F16, INT, TENSOR) else _UNKNOWN
        if name in _FOLLOW_FIRST:
            dtype = keyword_value(call, "dtype")
            if dtype is not None:
                cls = self.dtype_class(dtype)
                return Kind(cls, call if cls == F32 else None) if cls else Kind(TENSOR)
            return self.kind(call.args[0]) if call.args else _UNKNOWN
        if short in _INT_RESULT or name == "tf.where" and len(call.args) == 1:
            return Kind(INT)
        if name in ("tf.nn.moments", "tf.split", "tf.unstack"):
            return self.kind(call.args[0]) if call.args else _UNKNOWN
        if _is_math(name):
            operands = _tensor_operands(name, call)
            kinds = [self.kind(o) for o in operands]
            if kinds and all(k.kind == CONST for k in kinds) and not name.startswith("keras.backend."):
                return Kind(F32, call)  # `tf.math.sqrt(float(d))`: a math op on Python numbers is float32
            if name.startswith("keras.ops.") and ctx.is_keras3 and any(k.kind == F32 for k in kinds):
                # keras.ops promotes float16 with float32 to float32 (measured): the result really is float32
                return Kind(F32, None) if any(k.kind == F16 for k in kinds) else _join(kinds)
            return _join(kinds)
        return _UNKNOWN




def _inside(node: ast.AST, stmt: ast.AST) -> bool:
    return (stmt.lineno, stmt.col_offset) <= (node.lineno, node.col_offset) <= (
        getattr(stmt, "end_lineno", stmt.lineno), getattr(stmt, "end_col_offset", stmt.col_offset))


def _number(node: ast.AST | None) -> float | None:
    sign = 1.0
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -sign if isinstance(node.op, ast.USub) else sign
        node = node.operand
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return sign * float(node.value)
    return None


def _is_float_literal(node: ast.AST | None) -> bool:
    if isinstance(node, (ast.List, ast.Tuple)):
        return bool(node.elts) and any(_is_float_literal(e) for e in node.elts) and all(
            _number(e) is not None or _is_float_literal(e) for e in node.elts)
    inner = node
    while isinstance(inner, ast.UnaryOp):
        inner = inner.operand
    return isinstance(inner, ast.Constant) and isinstance(inner.value, float)


def _tensor_operands(name: str, call: ast.Call) -> list[ast.AST]:
    """The arguments of a math call that carry tensors (lists flattened; condition, axis, name... skipped)."""
    args = list(call.args)
    if _short(name) == "where" and len(args) == 3:
        args = args[1:]
    if _short(name) in ("reshape", "transpose", "tile", "expand_dims", "squeeze", "gather", "reduce_sum",
                        "reduce_mean", "reduce_max", "reduce_min", "sum", "mean", "max", "min", "pad", "one_hot",
                        "split", "broadcast_to", "softmax", "log_softmax", "cumsum", "argmax", "argmin"):
        args = args[:1]
    result = []
    for arg in args + [kw.value for kw in call.keywords if kw.arg in ("x", "y", "a", "b", "values", "logits",
                                                                           "labels", "input", "tensor")]:
        if isinstance(arg, (ast.List, ast.Tuple)):
            result.extend(arg.elts)
        elif not isinstance(arg, ast.Starred):
            result.append(arg)
    return result


# ---------------------------------------------------------------------------------------------- MP403


def float16_problem(value: float) -> str | None:
    """'overflow' / 'underflow' when float16 cannot represent `value` (exact IEEE rounding, via struct 'e')."""
    try:
        rounded = struct.unpack("e", struct.pack("e", value))[0]
    except OverflowError:
        return _OVERFLOW
    if value != 0.0 and rounded == 0.0:
        return _UNDERFLOW
    return None


@dataclass
class _LiteralUse:
    confidence: Confidence
    use: ast.AST  # where the value meets float16


def _literal_context(ctx: StaticContext, flow: _Flow, start: ast.AST, problem: str) -> _LiteralUse | None:
    """Does the value at `start` (a literal, or a name/attribute bound to one) meet a float16 tensor?"""
    cur = start
    for _ in range(8):
        parent = ctx.parents.get(cur)
        if parent is None:
            return None
        if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, (ast.USub, ast.UAdd)):
            cur = parent
            continue
        if isinstance(parent, ast.BinOp):
            if isinstance(parent.op, (ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift, ast.MatMult)):
                return None
            other = parent.right if cur is parent.left else parent.left
            kind = flow.kind(other).kind
            if kind == F16:
                return _LiteralUse(Confidence.HIGH, parent)
            if kind == TENSOR:
                return _LiteralUse(Confidence.MEDIUM, parent)
            if kind in (F32, INT):
                return None
            cur = parent
            continue
        if isinstance(parent, ast.AugAssign) and cur is parent.value:
            kind = flow.kind(parent.target).kind
            if kind == F16:
                return _LiteralUse(Confidence.HIGH, parent)
            if kind == TENSOR:
                return _LiteralUse(Confidence.MEDIUM, parent)
            return None
        if isinstance(parent, (ast.List, ast.Tuple)) and isinstance(ctx.parents.get(parent), ast.Call):
            cur = parent
            continue
        if isinstance(parent, ast.keyword):
            call = ctx.parents.get(parent)
            if parent.arg in ("dtype", "name", "axis", "shape"):
                return None
            arg_parent = call
        elif isinstance(parent, ast.Call) and cur is not parent.func:
            arg_parent = parent
        else:
            return None
        call = arg_parent
        name = ctx.call_name(call)
        if not _is_math(name):
            return None  # user functions, built-in layer constructors (LayerNormalization(epsilon=...)), ...
        if name in _CAST:
            cls = flow.dtype_class(call.args[1] if len(call.args) > 1 else keyword_value(call, "dtype"))
            return _LiteralUse(Confidence.HIGH, call) if cls == F16 else None
        if name in _VALUE or name in _DEFAULT_FLOAT32:
            dtype = keyword_value(call, "dtype")
            if dtype is None and name in ("tf.constant", "tf.convert_to_tensor") and len(call.args) > 1:
                dtype = call.args[1]
            if dtype is not None:
                cls = flow.dtype_class(dtype)
                return _LiteralUse(Confidence.HIGH, call) if cls == F16 else None
            cur = call  # float32 by default: a problem only where it meets float16 (also an MP406)
            continue
        if problem == _OVERFLOW and _short(name) in _BOUNDS:
            return None  # max(x, -inf) is x: a huge bound that becomes inf is harmless
        operands = [o for o in _tensor_operands(name, call) if o is not cur and not contains(o, start)]
        kinds = [flow.kind(o).kind for o in operands]
        if F32 in kinds:
            return None
        if F16 in kinds:
            return _LiteralUse(Confidence.HIGH, call)
        if TENSOR in kinds:
            return _LiteralUse(Confidence.MEDIUM, call)
        cur = call
    return None


@dataclass
class _Definition:
    """A literal and where it is bound: None (used in place), a local/module name, or a self attribute."""

    literal: ast.AST
    value: float
    uses: list[tuple[_Region, ast.AST]] = field(default_factory=list)


def _literal_definitions(ctx: StaticContext, regions: list[_Region]) -> dict[ast.AST, _Definition]:
    """Every out-of-float16-range literal that reaches a float16 region, keyed by the literal node."""
    found: dict[ast.AST, _Definition] = {}

    def note(literal: ast.AST, region: _Region, use: ast.AST) -> None:
        value = _number(literal)
        if value is None:
            return
        found.setdefault(literal, _Definition(literal, value)).uses.append((region, use))

    for region in regions:
        fn = region.function
        for node in ctx.walk_scope(fn):
            if isinstance(node, ast.Constant) and isinstance(node.value, float):
                literal = _signed(ctx, node)
                parent = ctx.parents.get(literal)
                if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
                    continue  # bound to a name: followed through its uses below
                note(literal, region, literal)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                bound = _bound_literal(ctx, region, node)
                if bound is not None:
                    note(bound, region, node)
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
                  and isinstance(node.value, ast.Name) and node.value.id == "self" and region.cls is not None):
                bound = _self_literal(ctx, region.cls, node)
                if bound is not None:
                    note(bound, region, node)
    return found


def _signed(ctx: StaticContext, node: ast.AST) -> ast.AST:
    parent = ctx.parents.get(node)
    while isinstance(parent, ast.UnaryOp) and isinstance(parent.op, (ast.USub, ast.UAdd)):
        node, parent = parent, ctx.parents.get(parent)
    return node


def _literal_value(node: ast.AST | None) -> ast.AST | None:
    """`node` itself when it is a (signed) float literal."""
    return node if _number(node) is not None and _is_float_literal(node) else None


def _bound_literal(ctx: StaticContext, region: _Region, name: ast.Name) -> ast.AST | None:
    flow = _flow(ctx, region)
    value, local = flow.binding(name)
    if value is not None:
        return _literal_value(value)
    if local:
        args = region.function.args  # type: ignore[attr-defined]
        positional = [*args.posonlyargs, *args.args]
        defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
        defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
        return _literal_value(defaults.get(name.id))
    return _literal_value(ctx.module_constants.get(name.id))


def _self_literal(ctx: StaticContext, cls: ast.ClassDef, attr: ast.Attribute) -> ast.AST | None:
    """The literal stored in `self.<attr>`: assigned directly, or from an `__init__` parameter default."""
    for node in ast.walk(cls):
        if not isinstance(node, ast.Assign):
            continue
        if not any(isinstance(t, ast.Attribute) and t.attr == attr.attr and isinstance(t.value, ast.Name)
                   and t.value.id == "self" for t in node.targets):
            continue
        literal = _literal_value(node.value)
        if literal is not None:
            return literal
        if isinstance(node.value, ast.Name):
            fn = ctx.enclosing_function(node)
            if fn is not None:
                args = fn.args  # type: ignore[attr-defined]
                positional = [*args.posonlyargs, *args.args]
                defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]],
                                    args.defaults))
                defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
                return _literal_value(defaults.get(node.value.id))
            return _literal_value(ctx.module_constants.get(node.value.id))
        return None
    return None


def _flow(ctx: StaticContext, region: _Region) -> _Flow:
    flows = ctx.memo("layer_code.flows")  # a _Flow refers to ctx
    key = id(region.function)
    if key not in flows:
        flows[key] = _Flow(ctx, region)
    return flows[key]


def _mp403_fix(ctx: StaticContext, literal: ast.AST, value: float, problem: str) -> Fix | None:
    if problem == _OVERFLOW and value < 0:
        replacement, why = "-1e4", "a float16-safe mask value"
    elif problem == _UNDERFLOW:
        replacement, why = ("1e-7" if value > 0 else "-1e-7"), "a float16-representable epsilon"
    else:
        return None
    dtype = _dtype_at(ctx, literal)
    if dtype is not None:  # the value changes only where it was broken: float32 code keeps its constant
        original = ctx.segment(literal)
        chosen = f'({replacement} if {dtype} == "float16" else {original})'
        return Fix(f"use `{replacement}` when `{dtype}` is float16 ({why}), `{original}` otherwise",
                   (ctx.edit(literal, chosen),))
    return Fix(f"replace `{ctx.segment(literal)}` by `{replacement}` ({why})", (ctx.edit(literal, replacement),),
               applicability="unsafe")


def _float16_guarded(ctx: StaticContext, literal: ast.AST) -> bool:
    """`(-1e4 if x.dtype == "float16" else -1e9)`: the literal is only used when the dtype is not float16."""
    parent = ctx.parents.get(literal)
    if not isinstance(parent, ast.IfExp) or parent.orelse is not literal:
        return False
    test = parent.test
    return isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq) and any(
        isinstance(side, ast.Constant) and side.value == "float16" or
        isinstance(side, ast.Attribute) and side.attr == "float16" for side in (test.left, *test.comparators))


def _dtype_at(ctx: StaticContext, literal: ast.AST) -> str | None:
    """An expression for the compute dtype where `literal` is evaluated: `self.compute_dtype` in a method body of a
    custom layer (in `__init__` only after `super().__init__(...)`), `t.dtype` in `lambda t: ...`; None elsewhere
    (module constants, default arguments)."""
    node, child = ctx.parents.get(literal), literal
    while node is not None and not isinstance(node, (*FUNCTION_NODES, ast.Lambda)):
        node, child = ctx.parents.get(node), node
    if node is None or isinstance(child, ast.arguments):
        return None
    params = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    if isinstance(node, ast.Lambda):
        return f"{params[0]}.dtype" if params else None
    cls = ctx.enclosing_class(node)
    if cls is None or cls.name not in ctx.custom_layer_classes or ctx.parents.get(node) is not cls \
            or not params or params[0] != "self":
        return None
    if node.name == "__init__" and not any(
            isinstance(c.func, ast.Attribute) and c.func.attr == "__init__" and isinstance(c.func.value, ast.Call)
            and getattr(c.func.value.func, "id", None) == "super" and c.lineno < literal.lineno
            for c in ctx.walk_scope(node) if isinstance(c, ast.Call)):
        return None
    return "self.compute_dtype"


@static_check("MP403")
def check_unsafe_constants(ctx: StaticContext) -> Iterable[Diagnostic]:
    for diagnostic, _ in unsafe_constant_findings(ctx):
        yield diagnostic


def unsafe_constant_findings(ctx: StaticContext) -> Iterator[tuple[Diagnostic, set[int]]]:
    """The static MP403 findings, each with the lines where its literal meets float16 (for the trace forms)."""
    regions = [r for r in _float16_regions(ctx) if r.float16_policy]
    if not regions:
        return
    definitions = _literal_definitions(ctx, regions)
    for literal, definition in sorted(definitions.items(), key=lambda kv: (kv[0].lineno, kv[0].col_offset)):
        problem = float16_problem(definition.value)
        if problem is None or _float16_guarded(ctx, literal):
            continue
        hits = []
        for region, use in definition.uses:
            found = _literal_context(ctx, _flow(ctx, region), use, problem)
            if found is not None:
                hits.append((region, use, found))
        if not hits:
            continue
        confidence = Confidence.HIGH if any(h[2].confidence == Confidence.HIGH for h in hits) else Confidence.MEDIUM
        region, use, found = next(h for h in hits if h[2].confidence == confidence)
        text = _render(ctx, literal)
        if problem == _OVERFLOW:
            what = (f"`{text}` overflows float16 (max 65504) and becomes {'-' if definition.value < 0 else ''}inf "
                    "(masked values turn into NaN)")
        else:
            what = f"`{text}` underflows float16 (smallest subnormal 5.96e-8) and becomes 0, so it guards nothing"
        lines = sorted({u.lineno for _, u, _ in hits})
        where = f"in the float16 computation of {region.where} (policy {region.float16_policy})"
        if literal is not use or len(lines) > 1 or lines[0] != literal.lineno:
            where += f", used on line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}"
        yield ctx.diagnostic("MP403", literal, f"{what} {where}", confidence=confidence,
                             fix=_mp403_fix(ctx, literal, definition.value, problem)), set(lines)


# ---------------------------------------------------------------------------------------------- MP406


def _combinations(ctx: StaticContext, region: _Region) -> Iterator[tuple[ast.AST, list[ast.AST]]]:
    """Points where tensors meet: arithmetic operators and TF / keras.ops math calls, with their operands."""
    for node in ctx.walk_scope(region.function):
        if isinstance(node, ast.BinOp) and not isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor,
                                                                     ast.LShift, ast.RShift)):
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
            if _is_math(name) and name not in _CAST and name not in _VALUE and name not in _DEFAULT_FLOAT32:
                yield node, _tensor_operands(name, node)


def _compute_dtype_expr(region: _Region) -> str | None:
    if region.cls is not None:
        return "self.compute_dtype"
    first = region.first_param()
    return f"{first}.dtype" if first else None


def _mp406_fix(ctx: StaticContext, region: _Region, origin: ast.AST) -> Fix | None:
    target = _compute_dtype_expr(region)
    if target is None or not isinstance(origin, ast.Call):
        return None
    name = ctx.call_name(origin)
    if isinstance(origin.func, ast.Attribute) and origin.func.attr in _WEIGHT_MAKERS:
        return ctx.add_keyword_fix(origin, "dtype", "self.compute_dtype" if region.cls else target,
                                   "create the weight in the compute dtype")
    if name in _CAST:
        dtype = origin.args[1] if len(origin.args) > 1 else keyword_value(origin, "dtype")
        if dtype is None:
            return None
        return Fix(f"cast to `{target}` instead", (ctx.edit(dtype, target),), applicability="unsafe")
    if name in ("tf.fill", "keras.backend.constant") or name is None:
        return None
    if _is_math(name) and name not in _VALUE and name not in _DEFAULT_FLOAT32 and name not in _FOLLOW_FIRST:
        # a math op on Python numbers: cast its argument (these ops take no dtype)
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
    if name == "tf.constant" and len(origin.args) > 1 and keyword_value(origin, "dtype") is None:
        return Fix(f"create it with dtype `{target}`", (ctx.edit(origin.args[1], target),))
    if name == "tf.Variable" and isinstance(origin.func, ast.Attribute):
        # dtype= alone fails: "Tensor conversion requested dtype float16 for Tensor with dtype float32"
        init = origin.args[0] if origin.args else keyword_value(origin, "initial_value")
        if init is None or keyword_value(origin, "dtype") is not None:
            return None
        cast = ctx.segment(origin.func).rsplit(".", 1)[0] + ".cast"
        return Fix(f"create it in `{target}`", (ctx.edit(init, f"{cast}({ctx.segment(init)}, {target})"),),
                   applicability="unsafe")
    fix = ctx.add_keyword_fix(origin, "dtype", target, f"create it with dtype `{target}`")
    if name in ("tf.Variable", "keras.Variable"):
        return Fix(fix.description, fix.edits, applicability="unsafe")
    return fix


def _render(ctx: StaticContext, node: ast.AST, limit: int = 60) -> str:
    """One-line source of `node` for a message: as written when on one line, else unparsed (no comments)."""
    text = ctx.segment(node)
    if not text or "\n" in text:
        text = ast.unparse(node)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _describe_origin(ctx: StaticContext, region: _Region, origin: ast.AST) -> str:
    name = ctx.call_name(origin) if isinstance(origin, ast.Call) else None
    short = _render(ctx, origin)
    if isinstance(origin, ast.Call) and isinstance(origin.func, ast.Attribute) and origin.func.attr in _WEIGHT_MAKERS:
        return f"the float32 weight `{short}` (policy {region.low_policy} does not autocast it)"
    if name in _CAST:
        dtype = origin.args[1] if len(origin.args) > 1 else keyword_value(origin, "dtype")
        if isinstance(dtype, ast.Attribute) and dtype.attr in ("dtype", "variable_dtype", "_dtype") and isinstance(
                dtype.value, ast.Name) and dtype.value.id == "self":
            return f"`{short}` (self.dtype is the variable dtype, float32 under {region.low_policy})"
        if isinstance(dtype, ast.Call):
            return f"`{short}` (floatx() stays float32 under {region.low_policy})"
        return f"the float32 cast `{short}`"
    if name in ("tf.Variable", "keras.Variable"):
        return f"the raw float32 variable `{short}` (Keras never autocasts it)"
    if _is_math(name) and name not in _VALUE and name not in _DEFAULT_FLOAT32 and name not in _FOLLOW_FIRST:
        return f"`{short}` (a math op on Python numbers returns a float32 tensor)"
    dtype = keyword_value(origin, "dtype") if isinstance(origin, ast.Call) else None
    if isinstance(dtype, ast.Call):
        return f"`{short}` (floatx() stays float32 under {region.low_policy})"
    if dtype is None and name in _DEFAULT_FLOAT32:
        return f"`{short}` (no dtype: float32 by default)"
    return f"the float32 value `{short}`"


@static_check("MP406")
def check_dtype_conflicts(ctx: StaticContext) -> Iterable[Diagnostic]:
    reported: set[ast.AST] = set()
    for region in _float16_regions(ctx):
        flow = _flow(ctx, region)
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
            name = ctx.call_name(point) if isinstance(point, ast.Call) else None
            upcast = (ctx.is_keras3 and (bool(name and name.startswith("keras.ops.")) or f32[0].upcast)
                      and not (isinstance(point, (ast.BinOp, ast.AugAssign)) and not f32[0].upcast))
            effect = (f"Keras 3 silently promotes the result to float32, so {region.where} stops computing in {low}"
                      if upcast else f"TensorFlow raises a dtype mismatch (expected {'half' if low == 'float16' else low}"
                      f", got float)")
            line = f"on line {point.lineno}" if point.lineno != origin.lineno else "there"
            message = (f"{_describe_origin(ctx, region, origin)} meets the {low} tensors of {region.where} {line}: "
                       f"{effect}")
            yield ctx.diagnostic("MP406", origin, message,
                                 confidence=Confidence.HIGH if not upcast else Confidence.MEDIUM,
                                 fix=_mp406_fix(ctx, region, origin))


# ---------------------------------------------------------------------------------------------- MP407

_EXP = {"exp", "expm1"}
_POW = {"pow", "power", "square", "l2_loss"}
_REDUCE = {"reduce_sum", "reduce_mean", "sum", "mean"}
_CROSS_ENTROPY = {"softmax_cross_entropy_with_logits", "softmax_cross_entropy_with_logits_v2",
                  "sparse_softmax_cross_entropy_with_logits", "categorical_crossentropy",
                  "sparse_categorical_crossentropy"}
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


def _guarded_log_argument(flow: _Flow, expr: ast.AST, depth: int = 0) -> bool:
    """`x + eps` with a float16-representable positive eps, `maximum(x, eps)`, `clip(...)`, softmax+eps..."""
    if depth > 4:
        return False
    if isinstance(expr, ast.Name):
        value, _ = flow.binding(expr)
        return value is not None and not isinstance(value, ast.AugAssign) and _guarded_log_argument(
            flow, value, depth + 1)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        for side in (expr.left, expr.right):
            value = _number(side)
            if value is None and isinstance(side, ast.Name):
                bound, local = flow.binding(side)
                value = _number(bound if bound is not None else flow.ctx.module_constants.get(side.id))
            if value is None and isinstance(side, ast.Attribute):
                return True  # `self.eps`: a guard (MP403 judges its value)
            if value is not None and value > 0 and float16_problem(value) is None:
                return True
        return False
    if isinstance(expr, ast.Call):
        name = flow.ctx.call_name(expr) or ""
        return _short(name) in ("maximum", "clip_by_value", "clip", "softplus", "sigmoid", "add") or _short(
            name) == "epsilon"
    return False


def _risky_reduction(ctx: StaticContext, flow: _Flow, call: ast.Call, operand: ast.AST | None) -> bool:
    """A float16 sum/mean likely to overflow: a full reduction (no axis), or one over squares/powers/exponentials
    (`reduce_sum(x * x)`, `reduce_mean(tf.square(x))`, `reduce_sum(tf.exp(z))`). A sum of bounded values over one
    axis (attention-weighted features) is not flagged: the static pass cannot see its size."""
    if len(call.args) < 2 and keyword_value(call, "axis") is None:
        return True
    return operand is not None and _grows(ctx, flow, operand, 0)


def _grows(ctx: StaticContext, flow: _Flow, expr: ast.AST, depth: int) -> bool:
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


def _non_positive(ctx: StaticContext, flow: _Flow, expr: ast.AST, depth: int) -> bool:
    """`x - reduce_max(x)`, `x - logsumexp(x)`, `-abs(x)`, `-x ** 2`: exp of these is at most 1 (stable softmax)."""
    if depth > 4:
        return False
    if isinstance(expr, ast.Name):
        value, _ = flow.binding(expr)
        return value is not None and not isinstance(value, ast.AugAssign) and _non_positive(ctx, flow, value,
                                                                                               depth + 1)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Sub):
        return _is_call_to(ctx, flow, expr.right, _MAX_LIKE, depth)
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = expr.operand
        if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Pow) and _number(inner.right) == 2.0:
            return True
        return _is_call_to(ctx, flow, inner, _NON_NEGATIVE, depth)
    return False


def _is_call_to(ctx: StaticContext, flow: _Flow, expr: ast.AST, shorts: set[str], depth: int) -> bool:
    if isinstance(expr, ast.Name):
        value, _ = flow.binding(expr)
        return value is not None and depth < 4 and _is_call_to(ctx, flow, value, shorts, depth + 1)
    if isinstance(expr, ast.Call):
        name = ctx.call_name(expr) or ""
        if _short(name) == "stop_gradient" and expr.args:
            return _is_call_to(ctx, flow, expr.args[0], shorts, depth + 1)
        return _short(name) in shorts
    return False


def _is_pow_safe_exponent(node: ast.AST) -> bool:
    value = _number(node)
    return value is not None and -0.5 <= value <= 1.0


@static_check("MP407")
def check_unsafe_ops(ctx: StaticContext) -> Iterable[Diagnostic]:
    seen: set[ast.AST] = set()
    for region in _float16_regions(ctx):
        if not region.float16_policy:
            continue  # bfloat16 has float32's range
        flow = _flow(ctx, region)
        for node in ctx.walk_scope(region.function):
            if node in seen:
                continue
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
                base, exponent = flow.kind(node.left).kind, flow.kind(node.right).kind
                if F16 not in (base, exponent) or F32 in (base, exponent):
                    continue
                if base == F16 and _is_pow_safe_exponent(node.right):
                    continue
                seen.add(node)
                what = f"`{_render(ctx, node)}`"
                yield ctx.diagnostic(
                    "MP407", node,
                    f"{what} raises a float16 tensor to a power in {region.where} (policy {region.float16_policy}): "
                    "x ** 2 is inf above 256; compute it in float32", confidence=Confidence.HIGH)
                continue
            if not isinstance(node, ast.Call):
                continue
            op = _unsafe_op(ctx, ctx.call_name(node))
            if op is None:
                continue
            operands = node.args[:2] if op in ("pow", "power") else node.args[:1]
            if op in _CROSS_ENTROPY:
                operands = [o for o in [*node.args[:2], keyword_value(node, "logits"), keyword_value(node, "output"),
                                        keyword_value(node, "y_pred")] if o is not None]
            if not operands:
                first = keyword_value(node, "x") or keyword_value(node, "input_tensor")
                operands = [first] if first is not None else []
            kinds = [flow.kind(o).kind for o in operands]
            if F16 not in kinds or F32 in kinds:
                continue
            if op == "log" and operands and _guarded_log_argument(flow, operands[0]):
                continue
            if op in _REDUCE and not _risky_reduction(ctx, flow, node, operands[0] if operands else None):
                continue
            if op in _EXP and operands and _non_positive(ctx, flow, operands[0], 0):
                continue
            if op in ("pow", "power") and len(node.args) > 1 and _is_pow_safe_exponent(node.args[1]):
                continue
            seen.add(node)
            yield _mp407_diagnostic(ctx, region, node, op)


unsafe_op_findings = check_unsafe_ops  # the static MP407 findings, for the trace forms


def _mp407_diagnostic(ctx: StaticContext, region: _Region, node: ast.Call, op: str) -> Diagnostic:
    name = ctx.call_name(node)
    policy = region.float16_policy
    if op in _EXP:
        why, confidence = "exp overflows float16 for inputs above 11.1 (inf, then NaN downstream)", Confidence.HIGH
    elif op in _POW:
        why, confidence = "squares and powers overflow float16 above 256 (x**2)", Confidence.HIGH
    elif op in _REDUCE:
        why, confidence = ("a float16 sum/mean over many elements overflows (inf) or loses the small terms; "
                           "TF's mixed-precision rewrite runs Sum/Mean in float32"), Confidence.MEDIUM
    elif op in _LOG:
        why, confidence = ("values below 6e-8 flush to 0 in float16 and log gives -inf; add a representable "
                           "epsilon or compute in float32"), Confidence.MEDIUM
    else:
        why, confidence = ("softmax cross-entropy is on TF's mixed-precision deny list: compute the loss from "
                           "float32 logits"), Confidence.MEDIUM
    return ctx.diagnostic("MP407", node, f"`{name}` runs on float16 tensors in {region.where} (policy {policy}): "
                                         f"{why}", confidence=confidence)


# ---------------------------------------------------------------- trace forms


@trace_check("MP406")
def trace_dtype_conflict(facts: dict, ctx: TraceContext) -> Iterable[Diagnostic]:
    """The run raised a float16/float32 mismatch ("expected half but is float"): report it on the class of the
    layer whose call raised (when it is defined in this file), else at the raising line."""
    verdict = exception_verdict(facts)
    if not verdict or verdict.get("code") != "MP406":
        return []
    exception = facts["exception"]
    record = layer_record(facts, exception.get("layer_uid"))
    where = exception.get("location")
    cls = ctx.static.classes.get(record["class"]) if record and ctx.static else None
    if cls is not None:
        where = {"file": ctx.path, "line": cls.lineno}
    name = f"layer `{record['class']}`" if record else "a layer"
    op = f" in {verdict['op']}" if verdict.get("op") else ""
    return [ctx.diagnostic("MP406", where, f"{name} mixes float16 and float32{op} and raised when the model ran: "
                           f"{first_message_line(exception.get('message', ''))}; use self.compute_dtype / inputs.dtype "
                           f"instead of hard-coded float32", layer=record.get("name") if record else None)]
