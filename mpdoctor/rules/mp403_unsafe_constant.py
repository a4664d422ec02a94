"""MP403 float16-unsafe-constant: a literal float16 cannot represent, used in float16 computation of user code."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic, Fix
from mpdoctor.facts.op_dtypes import CAST, DEFAULT_FLOAT32, F16, F32, INT, TENSOR, VALUE
from mpdoctor.registry import define_rule, static_check, static_verdicts, trace_check
from mpdoctor.static.astutil import contains, keyword_value
from mpdoctor.static.context import StaticContext
from mpdoctor.static.dataflow import Flow, flow_of, is_math, last_part, render, tensor_operands
from mpdoctor.static.float16_regions import Region, float16_regions
from mpdoctor.static.literals import OVERFLOW, UNDERFLOW, float16_problem, is_float_literal, number
from mpdoctor.static.tree_index import FUNCTION_NODES
from mpdoctor.trace_context import TraceContext
from mpdoctor.trace_user_code import downgrade, unsafe_constants, user_layers

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts

define_rule(
    "MP403",
    "float16-unsafe-constant",
    "error",
    "ST",
    True,
    summary="A literal that float16 cannot represent (-1e9, 1e-12) is used in float16 user code.",
    what="""
        A float literal that float16 cannot hold is used in the float16 computation of your own code: the `call`
        of a custom Layer/Model (and the `self.` helper methods and module-level functions it calls) or a function
        given to `keras.layers.Lambda` (and the functions it calls), when that layer computes in float16
        (`mixed_float16` or `float16`, globally or via `dtype=`). Float16 overflows above 65504 (`-1e9`, `1e10`,
        `-1e5` become -inf/inf) and flushes nonzero values below 5.96e-8 to zero (`1e-9`, `1e-12` become 0).

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
        value (or the name of a module constant holding it) as -inf/inf/0 in that graph is confirmed (passes
        static+trace); one whose use lines all compute in float32 there (e.g. after a cast the static pass could
        not see) is downgraded to info, with the reason.
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
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")

        class MaskedSoftmax(keras.layers.Layer):
            def call(self, scores, mask):
                scores += (1.0 - mask) * -1e9   # -inf in float16, and 0 * -inf is NaN
                return keras.ops.softmax(scores)

        scores, mask = keras.Input((16,)), keras.Input((16,))
        weights = MaskedSoftmax()(scores, mask)
        model = keras.Model([scores, mask], keras.layers.Activation("linear", dtype="float32")(weights))
        """,
    good="""
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")

        class MaskedSoftmax(keras.layers.Layer):
            def call(self, scores, mask):
                scores += (1.0 - mask) * -1e4   # finite in float16, exp() is still 0
                return keras.ops.softmax(scores)

        scores, mask = keras.Input((16,)), keras.Input((16,))
        weights = MaskedSoftmax()(scores, mask)
        model = keras.Model([scores, mask], keras.layers.Activation("linear", dtype="float32")(weights))
        """,
    fix="""
        Replaces a large negative literal by `-1e4` (finite in float16 with room for the scores it is added to,
        and `exp(-1e4)` is exactly 0, so softmax masks behave as before) and a tiny epsilon by `1e-7` (the value of
        `keras.backend.epsilon()`, a nonzero float16 subnormal, ~1.2e-7). Inside a custom layer's method (after
        `super().__init__` in `__init__`) or a Lambda the value is chosen from the dtype, so float32 code keeps its
        constant: `(-1e4 if self.compute_dtype == "float16" else -1e9)` / `t.dtype` (a safe fix). Elsewhere (module
        constants, default arguments) the plain replacement changes the number everywhere: marked unsafe, review
        it. `-65504` (`tf.float16.min`) is NOT used, because adding it to a negative score overflows again. Where
        an epsilon divides (`x / (norm + eps)`), prefer `1e-4` or up, since `1 / 1e-7`
        overflows float16; where you need the exact value, compute that part in float32 instead (cast in, cast
        out). Large positive literals get no automatic fix.
        """,
)


_BOUNDS = {"maximum", "minimum", "clip_by_value", "clip"}


@dataclass
class _LiteralUse:
    confidence: Confidence
    use: ast.AST  # where the value meets float16


@dataclass(frozen=True)
class _Stop:
    """The end of the climb from a literal: where its value meets float16, or None (it does not, or cannot be told)."""

    use: _LiteralUse | None


_NO_USE = _Stop(None)


def _literal_context(ctx: StaticContext, flow: Flow, start: ast.AST, problem: str) -> _LiteralUse | None:
    """Does the value at `start` (a literal, or a name/attribute bound to one) meet a float16 tensor? Climbs from
    it through the expressions that carry it on (signs, arithmetic, lists of arguments, float32-by-default
    constructors), at most 8 levels."""
    cur = start
    for _ in range(8):
        parent = ctx.parents.get(cur)
        if parent is None:
            return None
        step = _climb(ctx, flow, start, cur, parent, problem)
        if isinstance(step, _Stop):
            return step.use
        cur = step
    return None


def _climb(
    ctx: StaticContext, flow: Flow, start: ast.AST, cur: ast.AST, parent: ast.AST, problem: str
) -> _Stop | ast.AST:
    """One level up from `cur` to its `parent`: the verdict, or the node to climb on from."""
    if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, (ast.USub, ast.UAdd)):
        return parent
    if isinstance(parent, ast.BinOp):
        return _through_operator(flow, cur, parent)
    if isinstance(parent, ast.AugAssign) and cur is parent.value:
        return _Stop(_use_by_kind(flow.kind(parent.target).kind, parent))
    if isinstance(parent, (ast.List, ast.Tuple)) and isinstance(ctx.parents.get(parent), ast.Call):
        return parent
    call = _call_taking(ctx, cur, parent)
    if call is None:
        return _NO_USE
    return _through_call(ctx, flow, start, cur, call, problem)


def _use_by_kind(kind: str, use: ast.AST) -> _LiteralUse | None:
    """A float16 operand is a sure meeting; a tensor of unknown dtype a likely one."""
    if kind == F16:
        return _LiteralUse(Confidence.HIGH, use)
    if kind == TENSOR:
        return _LiteralUse(Confidence.MEDIUM, use)
    return None


def _through_operator(flow: Flow, cur: ast.AST, parent: ast.BinOp) -> _Stop | ast.AST:
    if isinstance(parent.op, (ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift, ast.MatMult)):
        return _NO_USE
    other = parent.right if cur is parent.left else parent.left
    kind = flow.kind(other).kind
    if kind in (F16, TENSOR):
        return _Stop(_use_by_kind(kind, parent))
    if kind in (F32, INT):
        return _NO_USE
    return parent


def _call_taking(ctx: StaticContext, cur: ast.AST, parent: ast.AST) -> ast.AST | None:
    """The call `cur` is an argument of (positional, or a keyword other than dtype/name/axis/shape)."""
    if isinstance(parent, ast.keyword):
        return None if parent.arg in ("dtype", "name", "axis", "shape") else ctx.parents.get(parent)
    if isinstance(parent, ast.Call) and cur is not parent.func:
        return parent
    return None


def _dtype_argument(name: str, call: ast.Call) -> ast.AST | None:
    """The dtype a value constructor is given: `dtype=`, or the second positional of tf.constant/convert_to_tensor."""
    dtype = keyword_value(call, "dtype")
    if dtype is None and name in ("tf.constant", "tf.convert_to_tensor") and len(call.args) > 1:
        dtype = call.args[1]
    return dtype


def _through_call(
    ctx: StaticContext, flow: Flow, start: ast.AST, cur: ast.AST, call: ast.AST, problem: str
) -> _Stop | ast.AST:
    name = ctx.call_name(call)
    if not is_math(name):
        return _NO_USE  # user functions, built-in layer constructors (LayerNormalization(epsilon=...)), ...
    if name in CAST:
        cls = flow.dtype_class(call.args[1] if len(call.args) > 1 else keyword_value(call, "dtype"))
        return _Stop(_LiteralUse(Confidence.HIGH, call) if cls == F16 else None)
    if name in VALUE or name in DEFAULT_FLOAT32:
        dtype = _dtype_argument(name, call)
        if dtype is not None:
            return _Stop(_LiteralUse(Confidence.HIGH, call) if flow.dtype_class(dtype) == F16 else None)
        return call  # float32 by default: a problem only where it meets float16 (also an MP406)
    if problem == OVERFLOW and last_part(name) in _BOUNDS:
        return _NO_USE  # max(x, -inf) is x: a huge bound that becomes inf is harmless
    operands = [o for o in tensor_operands(name, call) if o is not cur and not contains(o, start)]
    kinds = [flow.kind(o).kind for o in operands]
    if F32 in kinds:
        return _NO_USE
    for kind in (F16, TENSOR):
        if kind in kinds:
            return _Stop(_use_by_kind(kind, call))
    return call


@dataclass
class _Definition:
    """A literal and where it is bound: None (used in place), a local/module name, or a self attribute."""

    literal: ast.AST
    value: float
    uses: list[tuple[Region, ast.AST]] = field(default_factory=list)


_LITERAL_USES = frozenset({ast.Constant, ast.Name, ast.Attribute})


def _literal_definitions(ctx: StaticContext, regions: list[Region]) -> dict[ast.AST, _Definition]:
    """Every out-of-float16-range literal that reaches a float16 region, keyed by the literal node."""
    found: dict[ast.AST, _Definition] = {}

    def note(literal: ast.AST, region: Region, use: ast.AST) -> None:
        value = number(literal)
        if value is None or float16_problem(value) is None:  # most literals of a model (1.0, 0.5) are fine
            return
        found.setdefault(literal, _Definition(literal, value)).uses.append((region, use))

    for region in regions:
        fn = region.function
        literal_names = _literal_names(ctx, region)
        for node in ctx.scope_nodes_of(fn, _LITERAL_USES):
            if isinstance(node, ast.Constant) and isinstance(node.value, float):
                literal = _signed(ctx, node)
                parent = ctx.parents.get(literal)
                if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
                    continue  # bound to a name: followed through its uses below
                note(literal, region, literal)
            elif isinstance(node, ast.Name) and node.id in literal_names and isinstance(node.ctx, ast.Load):
                bound = _bound_literal(ctx, region, node)
                if bound is not None:
                    note(bound, region, node)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and region.cls is not None
            ):
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
    return node if number(node) is not None and is_float_literal(node) else None


def _literal_names(ctx: StaticContext, region: Region) -> set[str]:
    """The names `_bound_literal` can find a literal for in the region: assigned one in its function, parameters
    that default to one, module constants that are one. Every other name's use is skipped without a lookup (most
    names of a model's code are layers and tensors)."""
    flow = flow_of(ctx, region)
    names = {
        name
        for name, entries in flow.assignments.items()
        if any(_literal_value(value) is not None for _position, value, _statement in entries)
    }
    args = getattr(region.function, "args", None)
    if args is not None:
        names.update(name for name, default in _defaults(args).items() if _literal_value(default) is not None)
    memo = ctx.memo("mp403.literal_constants")
    if "names" not in memo:
        memo["names"] = {n for n, value in ctx.module_constants.items() if _literal_value(value) is not None}
    return names | memo["names"]


def _defaults(args: ast.arguments) -> dict[str, ast.AST]:
    """Parameter name -> its default value."""
    positional = [*args.posonlyargs, *args.args]
    defaults = dict(
        zip([a.arg for a in positional[len(positional) - len(args.defaults) :]], args.defaults, strict=True)
    )
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None})
    return defaults


def _bound_literal(ctx: StaticContext, region: Region, name: ast.Name) -> ast.AST | None:
    flow = flow_of(ctx, region)
    value, local = flow.binding(name)
    if value is not None:
        return _literal_value(value)
    if local:
        return _literal_value(_defaults(region.function.args).get(name.id))  # type: ignore[attr-defined]
    return _literal_value(ctx.module_constants.get(name.id))


def _self_literal(ctx: StaticContext, cls: ast.ClassDef, attr: ast.Attribute) -> ast.AST | None:
    """The literal stored in `self.<attr>`: assigned directly, or from an `__init__` parameter default."""
    node = _self_assignments(ctx, cls).get(attr.attr)
    if node is None:
        return None
    literal = _literal_value(node.value)
    if literal is not None:
        return literal
    if isinstance(node.value, ast.Name):
        fn = ctx.enclosing_function(node)
        if fn is not None:
            return _literal_value(_defaults(fn.args).get(node.value.id))  # type: ignore[attr-defined]
        return _literal_value(ctx.module_constants.get(node.value.id))
    return None


def _self_assignments(ctx: StaticContext, cls: ast.ClassDef) -> dict[str, ast.Assign]:
    """Attribute name -> the first `self.<name> = ...` of the class (in ast.walk's order), found in one walk of
    the class for all of its `self.<name>` uses."""
    memo = ctx.memo("mp403.self_assignments")
    found = memo.get(cls)
    if found is None:
        found = memo[cls] = {}
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        found.setdefault(t.attr, node)
    return found


def _mp403_fix(ctx: StaticContext, literal: ast.AST, value: float, problem: str) -> Fix | None:
    if problem == OVERFLOW and value < 0:
        replacement, why = "-1e4", "a float16-safe mask value"
    elif problem == UNDERFLOW:
        replacement, why = ("1e-7" if value > 0 else "-1e-7"), "a float16-representable epsilon"
    else:
        return None
    dtype = _dtype_at(ctx, literal)
    if dtype is not None:  # the value changes only where it was broken: float32 code keeps its constant
        original = ctx.segment(literal)
        chosen = f'({replacement} if {dtype} == "float16" else {original})'
        return Fix(
            f"use `{replacement}` when `{dtype}` is float16 ({why}), `{original}` otherwise",
            (ctx.edit(literal, chosen),),
        )
    return Fix(
        f"replace `{ctx.segment(literal)}` by `{replacement}` ({why})",
        (ctx.edit(literal, replacement),),
        applicability="unsafe",
    )


def _float16_guarded(ctx: StaticContext, literal: ast.AST) -> bool:
    """`(-1e4 if x.dtype == "float16" else -1e9)`: the literal is only used when the dtype is not float16."""
    parent = ctx.parents.get(literal)
    if not isinstance(parent, ast.IfExp) or parent.orelse is not literal:
        return False
    test = parent.test
    return (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and any(
            (isinstance(side, ast.Constant) and side.value == "float16")
            or (isinstance(side, ast.Attribute) and side.attr == "float16")
            for side in (test.left, *test.comparators)
        )
    )


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
    if not _is_custom_layer_method(ctx, node, params):
        return None
    if node.name == "__init__" and not _after_super_init(ctx, node, literal):
        return None
    return "self.compute_dtype"


def _is_custom_layer_method(ctx: StaticContext, function: ast.AST, params: list[str]) -> bool:
    cls = ctx.enclosing_class(function)
    return (
        cls is not None
        and cls.name in ctx.custom_layer_classes
        and ctx.parents.get(function) is cls
        and bool(params)
        and params[0] == "self"
    )


def _after_super_init(ctx: StaticContext, init: ast.AST, literal: ast.AST) -> bool:
    """`super().__init__(...)` is called in `init` before the literal's line (the layer has its policy then)."""
    return any(
        isinstance(c.func, ast.Attribute)
        and c.func.attr == "__init__"
        and isinstance(c.func.value, ast.Call)
        and getattr(c.func.value.func, "id", None) == "super"
        and c.lineno < literal.lineno
        for c in ctx.walk_scope(init)
        if isinstance(c, ast.Call)
    )


def out_of_range(problem: str, negative: bool) -> str:
    """What float16 makes of the literal, in the words of both passes."""
    if problem == OVERFLOW:
        sign = "-" if negative else ""
        return (
            f"overflows float16 (max 65504) and becomes {sign}inf (a mask built on it can give NaN: 0 * inf, or a "
            "fully masked row)"
        )
    return "underflows float16 (smallest subnormal 5.96e-8) and becomes 0, so it guards nothing"


def advice(problem: str) -> str:
    safe = "-1e4 for a mask" if problem == OVERFLOW else "1e-7 or more"
    return f"use a float16-safe value ({safe}) or compute this part in float32"


@static_check("MP403")
def check_unsafe_constants(ctx: StaticContext) -> Iterable[Diagnostic]:
    for diagnostic, _ in unsafe_constant_findings(ctx):
        yield diagnostic


def unsafe_constant_findings(ctx: StaticContext) -> Iterator[tuple[Diagnostic, set[int]]]:
    """The static MP403 findings, each with the lines where its literal meets float16 (for the trace forms)."""
    regions = [r for r in float16_regions(ctx) if r.float16_policy]
    if not regions:
        return
    definitions = _literal_definitions(ctx, regions)
    for literal, definition in sorted(definitions.items(), key=lambda kv: (kv[0].lineno, kv[0].col_offset)):
        problem = float16_problem(definition.value)
        if problem is None or _float16_guarded(ctx, literal):
            continue
        hits = []
        for region, use in definition.uses:
            found = _literal_context(ctx, flow_of(ctx, region), use, problem)
            if found is not None:
                hits.append((region, use, found))
        if not hits:
            continue
        confidence = Confidence.HIGH if any(h[2].confidence == Confidence.HIGH for h in hits) else Confidence.MEDIUM
        region, use, found = next(h for h in hits if h[2].confidence == confidence)
        what = f"`{render(ctx, literal)}` {out_of_range(problem, definition.value < 0)}"
        lines = sorted({u.lineno for _, u, _ in hits})
        where = f"in the float16 computation of {region.where} (policy {region.float16_policy})"
        if literal is not use or len(lines) > 1 or lines[0] != literal.lineno:
            where += f", used on line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}"
        yield (
            ctx.diagnostic(
                "MP403",
                literal,
                f"{what} {where}; {advice(problem)}",
                confidence=confidence,
                fix=_mp403_fix(ctx, literal, definition.value, problem),
            ),
            set(lines),
        )


# ---------------------------------------------------------------- trace forms
# They confirm or downgrade the static findings rather than re-deciding them: the static pass knows which uses are
# guarded, the trace knows what actually ran in float16.


@trace_check("MP403")
def trace_unsafe_constants(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    """Out-of-range literals the traced float16 graph of a user layer holds as inf / 0 where the static pass found
    no MP403 use (static findings are confirmed through `verdicts` instead)."""
    constants = unsafe_constants(facts, ctx)
    if not constants:
        return []
    findings = unsafe_constant_findings(ctx.static) if ctx.static is not None else []
    used = set().union(*(uses for _, uses in findings))
    found = []
    for (line, problem), (layer, constant) in sorted(constants.items()):
        if line in used:
            continue
        what = out_of_range(problem, str(constant.value).startswith("-"))
        found.append(
            ctx.diagnostic(
                "MP403",
                ctx.at_line(line),
                f"a literal on this line {what}: the traced graph of `{layer.id}` ({layer.class_name}) feeds it to "
                f"`{constant.op}` as {constant.value}; {advice(problem)}",
                layer=layer.id,
            )
        )
    return found


@static_verdicts("MP403")
def verdicts(facts: Facts, ctx: TraceContext) -> dict:
    """ "confirm" when a use line holds the offending float16 constant in the traced graph of a user layer;
    "downgrade" when every use line lies in traced float16 user code that computes nothing in float16 there."""
    layers = user_layers(facts)
    if not layers or ctx.static is None:
        return {}
    constants = unsafe_constants(facts, ctx)
    found = {}
    for static, uses in unsafe_constant_findings(ctx.static):
        key = (static.code, static.location.line, static.location.column)
        hits = [constants[k] for k in sorted(constants) if k[0] in uses]
        if hits:
            layer, constant = hits[0]
            found[key] = (
                "confirm",
                f"trace: the float16 graph of `{layer.id}` holds the value as {constant.value} "
                f"in `{constant.op}` on line {constant.line}",
            )
        elif (verdict := downgrade(layers, uses)) is not None:
            found[key] = verdict
    return found
