"""The dtype flow of user code that runs in float16, shared by the rules about it (MP403, MP406, MP407).

"User code that runs in float16" is the `call` of a local Layer/Model subclass (and the `self.helper(...)` methods
it calls) whose instances compute in float16/bfloat16, and the function or lambda given to a `keras.layers.Lambda`
layer whose policy computes in float16/bfloat16. Built-in Keras layers are never looked into: LayerNormalization,
BatchNormalization, Softmax... compute their numerically sensitive parts in float32 internally.

- `float16_regions(ctx)` (mpdoctor.static.float16_regions): the function bodies above, each with the policies it
  computes under and how its parameters arrive (autocast to the compute dtype or not);
- `Flow`: a small per-function, straight-line dtype analysis that classifies an expression as float16-derived
  (from the autocast inputs, the layer's weights, sublayer outputs), provably float32 (a `tf.cast(x, tf.float32)`,
  a `tf.constant(..., dtype=tf.float32)`, a `tf.random.normal` without dtype, ...), an int/bool tensor, a Python
  number, or unknown. Findings are raised only on what the analysis can show; unknown stays quiet.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mpdoctor.facts.dtypes import is_float16_compute
from mpdoctor.facts.op_dtypes import (
    CAST,
    CONST,
    DEFAULT_FLOAT32,
    DTYPE_SECOND,
    F16,
    F32,
    FIRST_OPERAND_ONLY,
    FLOAT16_NAMES,
    FLOAT32_NAMES,
    FLOATX_GETTERS,
    FLOATX_SETTERS,
    FOLLOW_FIRST,
    INT,
    INT_NAME_PREFIXES,
    INT_RESULTS,
    MATH_PREFIXES,
    NOT_MATH_PREFIXES,
    NOT_TENSOR_ATTRIBUTES,
    PROMOTING_OPS_PREFIX,
    PROMOTION_RANK,
    SAME_AS_FIRST,
    TENSOR,
    TENSOR_KEYWORDS,
    VALUE,
    VALUE_LAST,
    VARIABLES,
    WEIGHT_MAKERS,
)
from mpdoctor.static.astutil import keyword_value
from mpdoctor.static.context import StaticContext
from mpdoctor.static.float16_regions import Region
from mpdoctor.static.literals import is_float_literal, number
from mpdoctor.static.tree_index import FUNCTION_NODES

_NUMBER_BUILTINS = frozenset({"len", "int", "range", "float"})  # Python calls whose result is a number
# Attributes that name a dtype: `self.compute_dtype`, `x.dtype`...
_DTYPE_ATTRIBUTES = frozenset({"compute_dtype", "_compute_dtype", "dtype", "variable_dtype", "_dtype"})


def last_part(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def is_math(name: str | None) -> bool:
    return bool(name) and name.startswith(MATH_PREFIXES) and not name.startswith(NOT_MATH_PREFIXES)


def _combine(*kinds: str | None) -> str | None:
    known = [k for k in kinds if k is not None]
    if not known:
        return None
    if len(known) < len(kinds) and max(PROMOTION_RANK[k] for k in known) < PROMOTION_RANK[TENSOR]:
        return None  # a number combined with something unknown: unknown
    return max(known, key=lambda k: PROMOTION_RANK[k])


@dataclass(frozen=True)
class Kind:
    kind: str | None
    origin: ast.AST | None = None  # for F32: the node that made it float32 (what MP406 reports)
    upcast: bool = False  # Keras 3 keras.ops / KerasVariable: promotes instead of raising


# The kinds without an origin, one object each (a Kind is frozen): built once rather than at every expression.
_PLAIN = {kind: Kind(kind) for kind in (None, *PROMOTION_RANK)}
_UNKNOWN = _PLAIN[None]
_BUSY = Kind("busy")  # in Flow's memo while an expression is being worked out


def plain(kind: str | None) -> Kind:
    """The Kind of `kind` with no origin (and no upcast)."""
    return _PLAIN[kind]


def _join(kinds: Iterable[Kind]) -> Kind:
    """The kind of an op's result. float32 meeting float16 raises in TF (MP406 reports it); once that is fixed the
    result is float16, so the mix counts as float16 and later uses are judged as such."""
    kinds = list(kinds)
    if any(k.kind == F32 for k in kinds) and any(k.kind == F16 for k in kinds):
        return plain(F16)
    best = _combine(*(k.kind for k in kinds))
    if best is None:
        return _UNKNOWN
    for k in kinds:
        if k.kind == best:
            return k if best == F32 else plain(best)
    return plain(best)


# The statements and expressions that bind a name, for Flow's assignments.
_BINDINGS = frozenset({ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.comprehension, ast.NamedExpr})


class Flow:
    """Straight-line dtype kinds of the expressions of one region function."""

    def __init__(self, ctx: StaticContext, region: Region):
        self.ctx = ctx
        self.region = region
        self.fn = region.function
        self.assignments: dict[str, list[tuple[tuple[int, int], ast.AST, ast.AST]]] = {}
        self._memo: dict[ast.AST, Kind] = {}  # of each expression asked, _BUSY while it is being worked out
        if isinstance(self.fn, FUNCTION_NODES):
            for node in ctx.scope_nodes_of(self.fn, _BINDINGS):
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
        memo = self._memo
        found = memo.get(expr)
        if found is not None:
            return _UNKNOWN if found is _BUSY else found  # busy: an expression that depends on itself
        memo[expr] = _BUSY
        try:
            result = memo[expr] = self._kind(expr)
        except BaseException:
            del memo[expr]
            raise
        return result

    def _kind(self, expr: ast.AST) -> Kind:
        of_type = _EXPRESSION_KINDS.get(type(expr))  # the parser makes no subclasses
        return _UNKNOWN if of_type is None else of_type(self, expr)

    def _constant_kind(self, expr: ast.Constant) -> Kind:
        return plain(CONST) if isinstance(expr.value, (int, float, complex)) else _UNKNOWN

    def _name_kind(self, expr: ast.Name) -> Kind:
        value, local = self.binding(expr)
        if value is not None:
            if isinstance(value, ast.AugAssign):
                return _join([self._aug_prior(expr, value), self.kind(value.value)])
            return self.kind(value)
        if local:
            return plain(self.region.params.get(expr.id)) if expr.id in self.region.params else _UNKNOWN
        const = self.ctx.module_constants.get(expr.id)
        if isinstance(const, (ast.Constant, ast.UnaryOp)) and number(const) is not None:
            return plain(CONST)
        return _UNKNOWN

    def _unary_kind(self, expr: ast.UnaryOp) -> Kind:
        return plain(INT) if isinstance(expr.op, ast.Not) else self.kind(expr.operand)

    def _binary_kind(self, expr: ast.BinOp) -> Kind:
        return _join([self.kind(expr.left), self.kind(expr.right)])

    def _condition_kind(self, expr: ast.Compare | ast.BoolOp) -> Kind:
        return plain(INT)

    def _if_kind(self, expr: ast.IfExp) -> Kind:
        return _join([self.kind(expr.body), self.kind(expr.orelse)])

    def _subscript_kind(self, expr: ast.Subscript) -> Kind:
        inner = self.kind(expr.value)
        return inner if inner.kind in (F16, F32, TENSOR, INT) else _UNKNOWN

    def _attribute_kind(self, expr: ast.Attribute) -> Kind:
        if expr.attr in NOT_TENSOR_ATTRIBUTES:
            return plain(CONST)
        if isinstance(expr.value, ast.Name) and expr.value.id == "self":
            return self._self_attribute(expr)
        return _UNKNOWN

    def _aug_prior(self, use: ast.Name, stmt: ast.AugAssign) -> Kind:
        fake = ast.Name(id=use.id, ctx=ast.Load())
        fake.lineno, fake.col_offset = stmt.lineno, stmt.col_offset
        return self.kind(fake)

    def _self_attribute(self, expr: ast.Attribute) -> Kind:
        value = self.ctx.self_attribute(expr, expr.attr) if self.region.cls is not None else None
        if value is None:
            return _UNKNOWN
        if number(value) is not None:
            return plain(CONST)
        if isinstance(value, ast.Call):
            func = value.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr in WEIGHT_MAKERS
                and isinstance(func.value, ast.Name)
                and func.value.id == "self"
            ):
                dtype = keyword_value(value, "dtype")
                cls = self.dtype_class(dtype) if dtype is not None else None
                if cls == INT:
                    return plain(INT)
                if cls == F32 and self.region.pure:
                    # no autocast under a pure float16 policy (variable dtype == compute dtype)
                    return Kind(F32, value, upcast=self.ctx.is_keras3)
                return plain(F16)  # autocast to the compute dtype inside call
            name = self.ctx.call_name(value)
            if name in ("tf.Variable", "keras.Variable"):
                kind = self._call_kind(value, outside=True)
                return kind
            if name in VALUE or name in DEFAULT_FLOAT32 or name in CAST:
                return self._call_kind(value, outside=True)
        return _UNKNOWN

    def _outside_kind(self, value: ast.AST | None) -> Kind:
        """Kind of a value written in build/__init__ (no flow there: literals and dtype-explicit creators)."""
        if is_float_literal(value):
            return plain(F32)
        if isinstance(value, ast.Constant) and isinstance(value.value, int):
            return plain(INT)
        if isinstance(value, ast.Call):
            name = self.ctx.call_name(value)
            if name in VALUE or name in DEFAULT_FLOAT32 or name in CAST:
                dtype = keyword_value(value, "dtype")
                if dtype is None and name in CAST and len(value.args) > 1:
                    dtype = value.args[1]
                if dtype is not None:
                    cls = self.dtype_class(dtype)
                    return plain(cls) if cls else _UNKNOWN
                if name in DEFAULT_FLOAT32:
                    return plain(F32)
        return _UNKNOWN

    def dtype_class(self, expr: ast.AST | None) -> str | None:
        """F32 / F16 / INT for a dtype expression, None when unknown."""
        if expr is None:
            return None
        ctx = self.ctx
        if isinstance(expr, ast.Call) and ctx.call_name(expr) in FLOATX_GETTERS:
            return None if ctx.calls_named(*FLOATX_SETTERS) else F32
        if isinstance(expr, ast.Attribute) and expr.attr in _DTYPE_ATTRIBUTES:
            return self._dtype_attribute_class(expr)
        if isinstance(expr, ast.Name):
            value, _local = self.binding(expr)
            if value is not None and not isinstance(value, ast.AugAssign):
                return self.dtype_class(value)
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return _dtype_name_class(expr.value)
        resolved = ctx.resolve(expr)
        return _dtype_name_class(last_part(resolved)) if resolved and resolved.startswith(("tf.", "np.")) else None

    def _dtype_attribute_class(self, expr: ast.Attribute) -> str | None:
        """`self.compute_dtype` is the region's float16; `self.dtype` its variable dtype; `x.dtype` x's."""
        region = self.region
        if isinstance(expr.value, ast.Name) and expr.value.id == "self":
            if expr.attr in ("compute_dtype", "_compute_dtype"):
                return F16
            return F32 if region.mixed_only else (F16 if region.pure else None)
        if expr.attr == "compute_dtype":
            return F16
        if expr.attr == "dtype":
            inner = self.kind(expr.value)
            return inner.kind if inner.kind in (F16, F32) else None
        return None

    # -------------------------------------------------------------- calls

    def _call_kind(self, call: ast.Call, outside: bool = False) -> Kind:
        """`outside`: a value written in build/__init__, where there is no flow to follow."""
        name = self.ctx.call_name(call)
        if name is None:
            return self._local_call_kind(call)
        of_name = _CALL_KINDS.get(name)
        if of_name is not None:
            return of_name(self, call, name, outside)
        if last_part(name) in INT_RESULTS or (name == "tf.where" and len(call.args) == 1):
            return plain(INT)
        if is_math(name):
            return self._math_kind(call, name)
        return _UNKNOWN

    def _local_call_kind(self, call: ast.Call) -> Kind:
        """A call of something not imported: a sublayer (`self.dense(x)`, `Dense(4)(x)`) or a Python builtin."""
        layer = self.ctx.layer_instance(call.func)
        if layer is not None:
            policies = self.ctx.layer_policies(layer)
            if policies and all(p in ("float32", "float64") for p in policies):
                return plain(F32)  # deliberate float32 sublayer: provably float32, not reported
            if any(is_float16_compute(p) for p in policies):
                return self._float16_layer_output(layer.class_name, layer.module, layer.node)
            return _UNKNOWN
        if isinstance(call.func, ast.Name) and call.func.id in _NUMBER_BUILTINS:
            return plain(CONST)
        return _UNKNOWN

    def _float16_layer_output(self, class_name: str, module: str | None, node: ast.AST | None) -> Kind:
        """A float16 layer's output is float16, except a resizing UpSampling2D on Keras 2: its tf.image.resize returns
        float32 there (tf_keras, mixed_float16: measured), float16 on Keras 3. On a target with both, unknown: what
        would be fixed for one Keras breaks the other."""
        if class_name != "UpSampling2D" or module != "keras.layers" or not isinstance(node, ast.Call):
            return plain(F16)
        interpolation = keyword_value(node, "interpolation") or (node.args[2] if len(node.args) > 2 else None)
        if interpolation is None or (isinstance(interpolation, ast.Constant) and interpolation.value == "nearest"):
            return plain(F16)  # nearest neighbour keeps the dtype in both Keras
        majors = self.ctx.target.keras_majors
        if majors == {3}:
            return plain(F16)
        return plain(F32) if majors == {2} else _UNKNOWN

    def _cast_kind(self, call: ast.Call, name: str, outside: bool) -> Kind:
        dtype = call.args[1] if len(call.args) > 1 else keyword_value(call, "dtype")
        cls = self.dtype_class(dtype)
        if cls == F32:
            return Kind(F32, call)
        if cls in (F16, INT):
            return plain(cls)
        return plain(TENSOR)

    def _explicit_dtype_kind(self, call: ast.Call, dtype: ast.AST) -> Kind:
        cls = self.dtype_class(dtype)
        return Kind(cls, call if cls == F32 else None) if cls else plain(TENSOR)

    def _value_kind(self, call: ast.Call, name: str, outside: bool) -> Kind:
        """A value constructor or a creator with a default dtype: the `dtype=` given, else the default, else the
        value's."""
        dtype = keyword_value(call, "dtype")
        if dtype is None and name in DTYPE_SECOND and len(call.args) > 1:
            dtype = call.args[1]
        if dtype is not None:
            return self._explicit_dtype_kind(call, dtype)
        if name in DEFAULT_FLOAT32:
            return Kind(F32, call)
        value = _constructed_value(call, name)
        inner = self.kind(value) if not outside else self._outside_kind(value)
        if is_float_literal(value):
            return Kind(F32, call)
        if name in VARIABLES and inner.kind in (None, TENSOR, CONST):
            # a raw variable takes its initial value's dtype: initializers, tf.ones/zeros, tf.random.* and
            # Python floats all default to float32 (a float64 NumPy array also conflicts)
            return Kind(F32, call)
        if inner.kind == F32:
            return Kind(F32, call if name in VARIABLES else inner.origin or call)
        return plain(inner.kind) if inner.kind in (F16, INT, TENSOR) else _UNKNOWN

    def _follow_first_kind(self, call: ast.Call, name: str, outside: bool) -> Kind:
        dtype = keyword_value(call, "dtype")
        if dtype is not None:
            return self._explicit_dtype_kind(call, dtype)
        return self._first_argument_kind(call, name, outside)

    def _first_argument_kind(self, call: ast.Call, name: str, outside: bool) -> Kind:
        return self.kind(call.args[0]) if call.args else _UNKNOWN

    def _math_kind(self, call: ast.Call, name: str) -> Kind:
        kinds = [self.kind(o) for o in tensor_operands(name, call)]
        if kinds and all(k.kind == CONST for k in kinds) and not name.startswith("keras.backend."):
            return Kind(F32, call)  # `tf.math.sqrt(float(d))`: a math op on Python numbers is float32
        if name.startswith(PROMOTING_OPS_PREFIX) and self.ctx.is_keras3 and any(k.kind == F32 for k in kinds):
            # keras.ops promotes float16 with float32 to float32: the result really is float32
            return plain(F32) if any(k.kind == F16 for k in kinds) else _join(kinds)
        return _join(kinds)


_EXPRESSION_KINDS: dict[type, Callable[[Flow, Any], Kind]] = {
    ast.Constant: Flow._constant_kind,
    ast.Name: Flow._name_kind,
    ast.UnaryOp: Flow._unary_kind,
    ast.BinOp: Flow._binary_kind,
    ast.Compare: Flow._condition_kind,
    ast.BoolOp: Flow._condition_kind,
    ast.IfExp: Flow._if_kind,
    ast.Subscript: Flow._subscript_kind,
    ast.Attribute: Flow._attribute_kind,
    ast.Call: Flow._call_kind,
}
# The calls whose result's dtype their name tells (mpdoctor.facts.op_dtypes), each with how to work it out. No name
# is in two of these sets, nor ends in one of INT_RESULTS (tests/test_dataflow.py): the order of the checks is free.
_CALL_KINDS: dict[str, Callable[[Flow, ast.Call, str, bool], Kind]] = {
    **dict.fromkeys(CAST, Flow._cast_kind),
    **dict.fromkeys(VALUE | DEFAULT_FLOAT32, Flow._value_kind),
    **dict.fromkeys(FOLLOW_FIRST, Flow._follow_first_kind),
    **dict.fromkeys(SAME_AS_FIRST, Flow._first_argument_kind),
}


def _dtype_name_class(text: str) -> str | None:
    """F32 / F16 / INT for a dtype's name (`"float32"`, the `float16` of `tf.float16`), None when unknown."""
    if text in FLOAT32_NAMES:
        return F32
    if text in FLOAT16_NAMES:
        return F16
    if text.startswith(INT_NAME_PREFIXES):
        return INT
    return None


def _constructed_value(call: ast.Call, name: str) -> ast.AST | None:
    """The value a constructor makes a tensor or variable of: `tf.fill(dims, value)`, `tf.constant(value)`,
    `tf.Variable(initial_value=...)`."""
    if name in VALUE_LAST and call.args:
        return call.args[-1]
    if call.args:
        return call.args[0]
    return keyword_value(call, "initial_value") or keyword_value(call, "value")


def _inside(node: ast.AST, stmt: ast.AST) -> bool:
    return (
        (stmt.lineno, stmt.col_offset)
        <= (node.lineno, node.col_offset)
        <= (getattr(stmt, "end_lineno", stmt.lineno), getattr(stmt, "end_col_offset", stmt.col_offset))
    )


def tensor_operands(name: str, call: ast.Call) -> list[ast.AST]:
    """The arguments of a math call that carry tensors (lists flattened; condition, axis, name... skipped)."""
    args = list(call.args)
    if last_part(name) == "where" and len(args) == 3:
        args = args[1:]
    if last_part(name) in FIRST_OPERAND_ONLY:
        args = args[:1]
    result = []
    for arg in args + [kw.value for kw in call.keywords if kw.arg in TENSOR_KEYWORDS]:
        if isinstance(arg, (ast.List, ast.Tuple)):
            result.extend(arg.elts)
        elif not isinstance(arg, ast.Starred):
            result.append(arg)
    return result


def flow_of(ctx: StaticContext, region: Region) -> Flow:
    flows = ctx.memo("layer_code.flows")  # a Flow refers to ctx
    key = id(region.function)
    if key not in flows:
        flows[key] = Flow(ctx, region)
    return flows[key]


def render(ctx: StaticContext, node: ast.AST, limit: int = 60) -> str:
    """One-line source of `node` for a message: as written when on one line, else unparsed (no comments)."""
    text = ctx.segment(node)
    if not text or "\n" in text:
        text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."
