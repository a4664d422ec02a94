"""Where casts to float32 meet the layers that consume them: Sequential neighbours, `model.add` sequences and
functional calls."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from mpdoctor.facts.keras_semantics import INPUT_LAYERS, SEQUENTIAL, autocasts_argument
from mpdoctor.facts.records import LayerRecord
from mpdoctor.static.context import StaticContext
from mpdoctor.static.policies import dtype_keyword, policy_from_expr

_TF_CASTS = ("tf.cast", "tf.dtypes.cast")
_CAST_FUNCTIONS = (*_TF_CASTS, "keras.ops.cast", "keras.backend.cast")
_INT_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "string"}


def any_cast32(ctx: StaticContext) -> bool:
    """Whether the file casts anything to float32 at all: every pair below starts at such a call (a `tf.cast`, or
    the one a casting Lambda's function returns), so without one there is none to look for."""
    return any(_is_cast32_call(ctx, call) for call in ctx.calls_named(*_CAST_FUNCTIONS))


def sequential_pairs(ctx: StaticContext) -> Iterator[tuple[ast.AST, LayerRecord, bool]]:
    """(cast Lambda constructor, next layer) in `Sequential([...])` lists and consecutive `model.add(...)`."""
    for call in ctx.calls_named(*SEQUENTIAL):
        items = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "layers"), None)
        if isinstance(items, (ast.List, ast.Tuple)):
            yield from _adjacent_pairs(ctx, items.elts)
    for body in _statement_lists(ctx):
        run: list[ast.AST] = []
        receiver = None
        for stmt in body:
            added = _added_layer(stmt)
            if added is None:
                if run:
                    yield from _adjacent_pairs(ctx, run)
                run, receiver = [], None
                continue
            target, layer = added
            if target != receiver and run:
                yield from _adjacent_pairs(ctx, run)
                run = []
            receiver = target
            run.append(layer)
        if run:
            yield from _adjacent_pairs(ctx, run)


def _adjacent_pairs(ctx: StaticContext, elements: list[ast.AST]) -> Iterator[tuple[ast.AST, LayerRecord, bool]]:
    """(cast Lambda, next layer, whether the cast's input is known to be a float tensor): a cast Lambda first in
    the list may be converting integer data (uint8 images), which is a real conversion."""
    for index in range(len(elements) - 1):
        cast_layer = ctx.layer_instance(elements[index])
        if cast_layer is None or not _is_cast_lambda(ctx, cast_layer):
            continue
        if index > 0 and _non_float_input_layer(ctx, elements[index - 1]):
            continue
        consumer = ctx.layer_instance(elements[index + 1])
        if consumer is not None:
            yield cast_layer.node, consumer, index > 0


def _added_layer(stmt: ast.stmt) -> tuple[str, ast.AST] | None:
    """`model.add(layer)` as a statement: (receiver source name, layer expression)."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return None
    call = stmt.value
    if not (
        isinstance(call.func, ast.Attribute) and call.func.attr == "add" and len(call.args) == 1 and not call.keywords
    ):
        return None
    return ast.dump(call.func.value), call.args[0]


def _statement_lists(ctx: StaticContext) -> Iterator[list[ast.stmt]]:
    for node in [ctx.tree, *ctx.nodes]:
        fields = _BLOCK_FIELDS.get(type(node))
        if fields:
            for field in fields:
                value = getattr(node, field, None)
                if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                    yield value


# Only some statements, exception handlers, match cases and the module hold lists of statements: the other nodes
# (most of them) are not asked for their fields. Concrete classes: the parser makes no subclasses.
_BLOCK_FIELDS = {
    cls: tuple(f for f in ("body", "orelse", "finalbody") if f in cls._fields)
    for cls in vars(ast).values()
    if isinstance(cls, type) and issubclass(cls, (ast.stmt, ast.excepthandler, ast.match_case, ast.Module))
}


def functional_pairs(ctx: StaticContext) -> Iterator[tuple[ast.AST, LayerRecord, bool]]:
    """(cast, consuming layer) for `layer(y)` where `y` is a float32 cast: `tf.cast(...)`, `Lambda(cast)(x)`."""
    for call in ctx.calls:
        if isinstance(call.func, ast.Name) and call.func.id in ctx.custom_layer_classes:
            continue  # a constructor, not a layer call
        consumer = ctx.layer_instance(call.func)
        if consumer is None or consumer.node is call:
            continue
        if _inside_custom_layer(ctx, call):
            continue  # a cast inside a layer's own computation is that layer's business
        for arg in _autocast_arguments(ctx, call):
            for expr in _flatten(arg):
                cast = _cast_source(ctx, expr, call)
                if cast is not None and cast is not consumer.node:
                    yield cast, consumer, True


def _autocast_arguments(ctx: StaticContext, call: ast.Call) -> list[ast.AST]:
    """The call arguments the layer autocasts (mpdoctor.facts.keras_semantics.autocasts_argument); masks and
    `training` are not floating inputs."""
    major = ctx.keras_version.major
    found = []
    for index, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            if major < 3:
                break  # tf_keras casts only the first argument: which one comes first is unknown
            arg = arg.value
        if autocasts_argument(major, index):
            found.append(arg)
    for kw in call.keywords:
        if (
            kw.arg
            and "mask" not in kw.arg
            and kw.arg != "training"
            and autocasts_argument(major, 0 if kw.arg == "inputs" else -1)
        ):
            found.append(kw.value)
    return found


def _flatten(expr: ast.AST) -> Iterator[ast.AST]:
    if isinstance(expr, (ast.List, ast.Tuple)):
        for elt in expr.elts:
            yield from _flatten(elt)
    elif isinstance(expr, ast.Dict):
        for value in expr.values:
            yield from _flatten(value)
    else:
        yield expr


def _inside_custom_layer(ctx: StaticContext, node: ast.AST) -> bool:
    cls = ctx.enclosing_class(node)
    while cls is not None:
        if cls.name in ctx.custom_layer_classes and not ctx.is_custom_model(cls):
            return True
        cls = ctx.enclosing_class(cls)
    return False


def _cast_source(ctx: StaticContext, expr: ast.AST, at: ast.AST, depth: int = 0) -> ast.AST | None:
    """The node that cast `expr` to float32 right before it reaches a layer: a `tf.cast(...)` call or the
    constructor of a casting `Lambda` layer; None when `expr` is anything else."""
    if depth > 6:
        return None
    if isinstance(expr, ast.Name):
        value = ctx.last_assignment(expr.id, at)
        return _cast_source(ctx, value, at, depth + 1) if value is not None else None
    if not isinstance(expr, ast.Call):
        return None
    if _is_cast32_call(ctx, expr):
        if ctx.is_keras3 and ctx.call_name(expr) in _TF_CASTS and ctx.enclosing_class(expr) is None:
            return None  # Keras 3 functional code: tf.cast on a KerasTensor raises, it is not silently undone
        source = expr.args[0] if expr.args else next((k.value for k in expr.keywords if k.arg in ("x", "tensor")), None)
        return None if source is None or _non_float_tensor(ctx, source, at) else expr
    layer = ctx.layer_instance(expr.func)
    if layer is not None and layer.node is not expr and _is_cast_lambda(ctx, layer):
        if expr.args and _non_float_tensor(ctx, expr.args[0], at):
            return None
        return layer.node
    return None


def _is_cast32_call(ctx: StaticContext, call: ast.AST) -> bool:
    if not isinstance(call, ast.Call) or ctx.call_name(call) not in _CAST_FUNCTIONS:
        return False
    dtype = call.args[1] if len(call.args) > 1 else dtype_keyword(call)
    return dtype is not None and _dtype_name(ctx, dtype) == "float32"


def _dtype_name(ctx: StaticContext, expr: ast.AST) -> str | None:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {"float": "float32", "half": "float16", "double": "float64"}.get(expr.value, expr.value)
    name = ctx.resolve(expr)
    if name and name.startswith(("tf.", "np.", "tf.dtypes.")):
        last = name.rsplit(".", 1)[-1]
        return {"float": "float32", "half": "float16", "double": "float64"}.get(last, last)
    if isinstance(expr, ast.Name) and expr.id in ctx.module_constants:
        return _dtype_name(ctx, ctx.module_constants[expr.id])
    return policy_from_expr(expr, ctx.imports, ctx.module_constants)


def _is_cast_lambda(ctx: StaticContext, layer: LayerRecord) -> bool:
    """`Lambda(f)` where `f` does nothing but cast its argument to float32."""
    if layer.qualname != "keras.layers.Lambda":
        return False
    call = layer.node
    fn = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "function"), None)
    if any(k.arg == "arguments" for k in call.keywords):
        return False
    return fn is not None and _is_cast_function(ctx, fn, call)


def _is_cast_function(ctx: StaticContext, fn: ast.AST, at: ast.AST, depth: int = 0) -> bool:
    if depth > 4:
        return False
    if isinstance(fn, ast.Lambda):
        return _returns_cast_of_first_param(ctx, fn.args, fn.body)
    if isinstance(fn, ast.Name):
        defs = [n for n in ctx.nodes if isinstance(n, ast.FunctionDef) and n.name == fn.id]
        if len(defs) == 1:
            body = [
                s for s in defs[0].body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
            ]  # docstring
            return (
                len(body) == 1
                and isinstance(body[0], ast.Return)
                and body[0].value is not None
                and _returns_cast_of_first_param(ctx, defs[0].args, body[0].value)
            )
        if not defs:
            value = ctx.last_assignment(fn.id, at) or ctx.module_constants.get(fn.id)
            return value is not None and _is_cast_function(ctx, value, at, depth + 1)
    return False


def _returns_cast_of_first_param(ctx: StaticContext, args: ast.arguments, body: ast.AST) -> bool:
    params = [*args.posonlyargs, *args.args]
    if not params or not _is_cast32_call(ctx, body):
        return False
    source = body.args[0] if body.args else None  # type: ignore[attr-defined]
    return isinstance(source, ast.Name) and source.id == params[0].arg


def _non_float_input_layer(ctx: StaticContext, element: ast.AST) -> bool:
    """A Sequential element that is an `InputLayer`/`Input` with an integer or string dtype."""
    if isinstance(element, ast.Name):
        element = ctx.last_assignment(element.id, element) or element
    if isinstance(element, ast.Call) and ctx.call_name(element) in INPUT_LAYERS:
        dtype = dtype_keyword(element)
        return dtype is not None and _dtype_name(ctx, dtype) in _INT_DTYPES
    return False


def _non_float_tensor(ctx: StaticContext, expr: ast.AST, at: ast.AST, depth: int = 0) -> bool:
    """`expr` is (a name bound to) `keras.Input(..., dtype=<integer or string>)`."""
    if depth > 6:
        return False
    if isinstance(expr, ast.Name):
        value = ctx.last_assignment(expr.id, at)
        return value is not None and _non_float_tensor(ctx, value, at, depth + 1)
    return _non_float_input_layer(ctx, expr)
