"""TF1 graphs in a file's source that build float16/bfloat16 variables (`tf.get_variable(..., dtype=tf.float16)`,
`tf.Variable` of a float16 tensor, `tf.layers` on float16 inputs, a `variable_scope(dtype=...)`), keyed by the
graph they build into: what a TF1 Saver of that graph restores into (MP301)."""

from __future__ import annotations

import ast

from mpdoctor.static.astutil import keyword_value
from mpdoctor.static.context import StaticContext
from mpdoctor.static.policies import policy_from_expr
from mpdoctor.static.tree_index import FUNCTION_NODES

_RESETS = ("tf.reset_default_graph", "tf.compat.v1.reset_default_graph")
_GRAPHS = ("tf.Graph", "tf.compat.v1.Graph")
_GET_VARIABLE = ("tf.get_variable", "tf.compat.v1.get_variable")
_VARIABLE = ("tf.Variable", "tf.compat.v1.Variable", "tf.compat.v1.VariableV1")
_VARIABLE_SCOPES = ("tf.variable_scope", "tf.compat.v1.variable_scope")
_TF1_LAYER_PREFIXES = ("tf.layers.", "tf.compat.v1.layers.")
_TENSOR_MAKERS = (
    "tf.cast",
    "tf.compat.v1.placeholder",
    "tf.placeholder",
    "tf.zeros",
    "tf.ones",
    "tf.constant",
    "tf.fill",
    "tf.random.normal",
    "tf.random.uniform",
    "tf.compat.v1.random_normal",
    "tf.compat.v1.placeholder_with_default",
    "tf.convert_to_tensor",
)
LOW_DTYPES = ("float16", "bfloat16")


def tf1_call_name(ctx: StaticContext, call: ast.AST) -> str | None:
    """Canonical name of a call's function with `tf.compat.v1.` spelled `tf.` (`import tensorflow.compat.v1 as tf`)."""
    name = ctx.call_name(call) if isinstance(call, ast.Call) else None
    if name and name.startswith("tf.compat.v1."):
        return "tf." + name[len("tf.compat.v1.") :]
    return name


def resolved_value(ctx: StaticContext, expr: ast.AST, at: ast.AST) -> ast.AST:
    """Follow a name to the value it was last assigned (same scope, then module constants)."""
    for _ in range(6):
        if not isinstance(expr, ast.Name):
            return expr
        value = ctx.last_assignment(expr.id, at)
        if value is None:
            value = ctx.module_constants.get(expr.id)
        if value is None:
            return expr
        expr = value
    return expr


def low_dtype(ctx: StaticContext, expr: ast.AST | None, at: ast.AST) -> str | None:
    """'float16' / 'bfloat16' when `expr` denotes such a dtype (`tf.float16`, `"float16"`, `tf.half`, a name)."""
    if expr is None:
        return None
    expr = resolved_value(ctx, expr, at)
    dtype = policy_from_expr(expr, ctx.imports, ctx.module_constants)
    return dtype if dtype in LOW_DTYPES else None


def _graph_container(ctx: StaticContext, node: ast.AST) -> ast.AST:
    """The innermost `with <tf.Graph()>.as_default():` block, function or module holding `node`."""
    current = ctx.parents.get(node)
    while current is not None:
        if isinstance(current, ast.With) and any(
            _is_graph_context(ctx, item.context_expr, current) for item in current.items
        ):
            return current
        if isinstance(current, FUNCTION_NODES):
            return current
        current = ctx.parents.get(current)
    return ctx.tree


def _is_graph_context(ctx: StaticContext, expr: ast.AST, at: ast.AST) -> bool:
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "as_default"):
        return False
    graph = resolved_value(ctx, expr.func.value, at)
    return isinstance(graph, ast.Call) and tf1_call_name(ctx, graph) in _GRAPHS


def graph_key(ctx: StaticContext, node: ast.AST) -> tuple[ast.AST, int]:
    """Which TF1 graph `node` builds into: its container plus how many reset_default_graph() came before it."""
    container = _graph_container(ctx, node)
    resets = sum(
        1
        for call in ctx.calls_named(*_RESETS)
        if _graph_container(ctx, call) is container and call.lineno < node.lineno
    )
    return container, resets


def _in_custom_getter_scope(ctx: StaticContext, node: ast.AST) -> bool:
    """Inside `with variable_scope(..., custom_getter=...)`: float32 master weights cast on read (NVIDIA recipe)."""
    current = ctx.parents.get(node)
    while current is not None and not isinstance(current, FUNCTION_NODES):
        if isinstance(current, ast.With):
            for item in current.items:
                expr = item.context_expr
                if (
                    isinstance(expr, ast.Call)
                    and tf1_call_name(ctx, expr) in _VARIABLE_SCOPES
                    and keyword_value(expr, "custom_getter") is not None
                ):
                    return True
        current = ctx.parents.get(current)
    return False


def _scope_dtype(ctx: StaticContext, node: ast.AST) -> str | None:
    """The dtype of an enclosing `with variable_scope(..., dtype=tf.float16)`."""
    current = ctx.parents.get(node)
    while current is not None and not isinstance(current, FUNCTION_NODES):
        if isinstance(current, ast.With):
            for item in current.items:
                expr = item.context_expr
                if isinstance(expr, ast.Call) and tf1_call_name(ctx, expr) in _VARIABLE_SCOPES:
                    dtype = low_dtype(ctx, keyword_value(expr, "dtype"), expr)
                    if dtype:
                        return dtype
        current = ctx.parents.get(current)
    return None


def _low_tensor(ctx: StaticContext, expr: ast.AST | None, at: ast.AST, depth: int = 0) -> str | None:
    """The low dtype of a TF1 tensor expression, when the source shows it."""
    if expr is None or depth > 6:
        return None
    if isinstance(expr, ast.Name):
        value = ctx.last_assignment(expr.id, at)
        return _low_tensor(ctx, value, at, depth + 1) if value is not None else None
    if not isinstance(expr, ast.Call):
        return None
    made = _low_variable(ctx, expr)
    if made:
        return made
    name = tf1_call_name(ctx, expr) or ""
    if name in _TENSOR_MAKERS:
        dtype_arg = keyword_value(expr, "dtype")
        if (
            dtype_arg is None
            and len(expr.args) > 1
            and name in ("tf.cast", "tf.zeros", "tf.ones", "tf.constant", "tf.convert_to_tensor")
        ):
            dtype_arg = expr.args[1]
        if dtype_arg is None and expr.args and "placeholder" in name:
            dtype_arg = expr.args[0]
        return low_dtype(ctx, dtype_arg, expr)
    if name.startswith(_TF1_LAYER_PREFIXES) and name.rsplit(".", 1)[-1][:1].islower():
        inputs = expr.args[0] if expr.args else keyword_value(expr, "inputs")
        return _low_tensor(ctx, inputs, at, depth + 1)
    if name in ("tf.matmul", "tf.nn.relu", "tf.add", "tf.nn.bias_add", "tf.reshape", "tf.identity"):
        return _low_tensor(ctx, expr.args[0] if expr.args else None, at, depth + 1)
    return None


def _low_variable(ctx: StaticContext, call: ast.Call) -> str | None:
    """'float16'/'bfloat16' when `call` creates a TF1 variable of that dtype."""
    name = tf1_call_name(ctx, call)
    if name in _GET_VARIABLE:
        if _in_custom_getter_scope(ctx, call):
            return None
        dtype_arg = keyword_value(call, "dtype")
        if dtype_arg is None and len(call.args) > 2:
            dtype_arg = call.args[2]
        return low_dtype(ctx, dtype_arg, call) if dtype_arg is not None else _scope_dtype(ctx, call)
    if name in _VARIABLE:
        dtype_arg = keyword_value(call, "dtype")
        if dtype_arg is None:
            initial = call.args[0] if call.args else keyword_value(call, "initial_value")
            return _low_tensor(ctx, initial, call, 1) if isinstance(initial, ast.Call) else None
        return low_dtype(ctx, dtype_arg, call)
    if name and name.startswith(_TF1_LAYER_PREFIXES) and name.rsplit(".", 1)[-1][:1].islower():
        inputs = call.args[0] if call.args else keyword_value(call, "inputs")
        return _low_tensor(ctx, inputs, call, 1)
    return None


def _variable_label(ctx: StaticContext, call: ast.Call) -> str:
    name = keyword_value(call, "name")
    if name is None and tf1_call_name(ctx, call) in _GET_VARIABLE and call.args:
        name = call.args[0]
    if isinstance(name, ast.Constant) and isinstance(name.value, str):
        return repr(name.value)
    return ctx.segment(call.func).rsplit(".", 1)[-1] + "(...)"


def float16_graphs(ctx: StaticContext) -> dict[tuple[ast.AST, int], tuple[str, list[str]]]:
    """TF1 graph key -> (low dtype, labels of the low-precision variables created in it)."""
    graphs: dict[tuple[ast.AST, int], tuple[str, list[str]]] = {}
    functions: dict[str, tuple[str, list[str]]] = {}
    for call in ctx.calls:
        dtype = _low_variable(ctx, call)
        if not dtype:
            continue
        key = graph_key(ctx, call)
        entry = graphs.setdefault(key, (dtype, []))
        entry[1].append(_variable_label(ctx, call))
        if isinstance(key[0], FUNCTION_NODES):
            functions.setdefault(key[0].name, (dtype, []))[1].append(_variable_label(ctx, call))
    # a graph that calls a local builder function creating float16 variables holds them too
    for call in ctx.calls:
        if isinstance(call.func, ast.Name) and call.func.id in functions:
            key = graph_key(ctx, call)
            if key not in graphs:
                dtype, labels = functions[call.func.id]
                graphs[key] = (dtype, [f"{call.func.id}(): {', '.join(labels)}"])
    return graphs
