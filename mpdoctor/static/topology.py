"""How the models of a file are put together, as far as the source shows it: which constructs produce a
top-level model's outputs (Sequential, functional, subclassed, keras.applications, nested models), which tensors
feed a layer (which activation a layer or op applies last: mpdoctor.static.activations)."""

from __future__ import annotations

import ast
from typing import NamedTuple, TypeGuard

from mpdoctor.facts.keras_semantics import (
    FUNCTIONAL,
    INPUT_LAYERS,
    SEQUENTIAL,
)
from mpdoctor.facts.records import LayerRecord
from mpdoctor.static.activations import activation_op
from mpdoctor.static.astutil import position
from mpdoctor.static.context import StaticContext
from mpdoctor.static.names import dotted_name
from mpdoctor.static.tree_index import FUNCTION_NODES


class ModelOutput(NamedTuple):
    """A construct that produces a model output tensor.

    `layer` is a :class:`LayerRecord` (the constructor of the output layer), or an `ast.Call` that is either an
    activation op applied to the last layer's output (`tf.nn.softmax(logits)`, see :func:`activation_op`) or a
    `keras.applications.<Arch>(...)` constructor (the model's own classifier is the output). `how` says, in
    words fit for a message, how the static pass knows it is an output ("last layer of Sequential([...])").
    """

    layer: LayerRecord | ast.Call
    how: str

    @property
    def node(self) -> ast.Call:
        return self.layer.node if isinstance(self.layer, LayerRecord) else self.layer


# Attributes only a model (not a sub-block) is used through: evidence a Sequential/Model is the top-level model.
_MODEL_USES = frozenset(
    {
        "compile",
        "fit",
        "evaluate",
        "predict",
        "predict_on_batch",
        "train_on_batch",
        "test_on_batch",
        "save",
        "save_weights",
        "load_weights",
        "export",
        "summary",
        "trainable_variables",
        "trainable_weights",
        "fit_generator",
    }
)
_LIST_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "__setitem__"})
_MAX_DEPTH = 8


def model_output_layers(ctx: StaticContext) -> list[ModelOutput]:
    """Every construct of the file that produces the output of a top-level model, in source order.

    Recognised model forms:

    * `Sequential([...])` / `Sequential(layers=[...])` (list literal, a name bound to one, `a + [b]`): the last
      element; `model.add(...)` on the variable the Sequential is bound to, in the same function: the last add
      (each branch of a trailing `if`/`else`, the body of a trailing loop, and what comes before a branch that may
      add nothing). A Sequential whose variable is `.pop()`-ed or whose list is mutated is skipped.
    * functional `Model(inputs, outputs)` / `Model(inputs=..., outputs=[...] | {...} | (...))` and
      `super().__init__(inputs, outputs)` inside a `keras.Model` subclass: each output tensor is resolved to the
      layer constructor that produced it (`Dense(10)(x)`, `head(x)` with `head = Dense(10)`, names assigned
      from either), or to an activation op (`keras.ops.softmax(logits)`).
    * `keras.Model` subclasses: what `call` returns (`self.head(x)`, a name assigned from it, tuples, dicts).
    * `keras.applications.<Arch>(...)`: the constructor call itself.
    * nested models: when the output is produced by a Sequential / functional / subclassed model used as a
      layer, the search continues into that model.

    A model that is used as a block of another (an element of a layer list, `self.block = Sequential(...)` in a
    layer class, a name called as a layer on a tensor and never compiled/fit/...) is not top level: its last
    layer is an output only when the enclosing model's output leads to it. Static approximation: straight-line
    name binding (`ctx.last_assignment`), no inter-procedural flow beyond "a function returning a model".
    """
    memo = ctx.memo("model_output_layers")
    if "outputs" in memo:
        return memo["outputs"]
    found: dict[ast.AST, ModelOutput] = {}
    for call in _model_constructors(ctx):
        if not _is_submodel(ctx, call, 0):
            for out in _model_outputs(ctx, call, 0, frozenset()):
                found.setdefault(out.node, out)
    for name, cls in ctx.custom_layer_classes.items():
        if not ctx.is_custom_model(cls):
            continue
        sites = [lc.node for lc in ctx.construction_sites(name) if lc.qualname == name]
        if sites and all(_is_submodel(ctx, site, 0) for site in sites):
            continue
        for out in _subclass_outputs(ctx, cls, 0, frozenset()):
            found.setdefault(out.node, out)
    result = sorted(found.values(), key=lambda o: (o.node.lineno, o.node.col_offset))
    memo["outputs"] = result
    return result


def _model_constructors(ctx: StaticContext) -> list[ast.Call]:
    """The calls `_model_kind` names, in source order, from the context's call indexes (rather than asking it of
    every call of the file)."""
    candidates = [
        *ctx.calls_named(*SEQUENTIAL, *FUNCTIONAL),
        *ctx.calls_whose_name(_is_application_name),
        *ctx.method_calls("__init__"),  # super().__init__(inputs, outputs)
        *(
            call
            for name, cls in ctx.custom_layer_classes.items()
            if ctx.is_custom_model(cls)
            for call in ctx.calls_to(name)
        ),
    ]
    return sorted((call for call in dict.fromkeys(candidates) if _model_kind(ctx, call)), key=position)


def _model_kind(ctx: StaticContext, call: ast.Call) -> str | None:
    """'sequential', 'functional', 'application' or 'subclass' for a model constructor call, else None."""
    name = ctx.call_name(call)
    if name in SEQUENTIAL:
        return "sequential"
    if name in FUNCTIONAL:
        return "functional" if _functional_outputs_arg(call) is not None else None
    if name and _is_application_name(name):
        return "application"
    if _is_super_init(ctx, call) and _functional_outputs_arg(call) is not None:
        return "functional"
    if (
        isinstance(call.func, ast.Name)
        and call.func.id in ctx.custom_layer_classes
        and ctx.is_custom_model(ctx.custom_layer_classes[call.func.id])
    ):
        return "subclass"
    return None


def _is_application_name(name: str) -> bool:
    if not name.startswith("keras.applications."):
        return False
    parts = name.split(".")
    return len(parts) in (3, 4) and parts[-1][:1].isupper()


def _is_super_init(ctx: StaticContext, call: ast.Call) -> bool:
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr == "__init__"
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "super"
    ):
        return False
    cls = ctx.enclosing_class(call)
    return cls is not None and cls.name in ctx.custom_layer_classes and ctx.is_custom_model(cls)


def _functional_outputs_arg(call: ast.Call) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == "outputs":
            return kw.value
    if len(call.args) >= 2 and not any(isinstance(a, ast.Starred) for a in call.args[:2]):
        return call.args[1]
    return None


def _model_outputs(ctx: StaticContext, call: ast.Call, depth: int, visiting: frozenset) -> list[ModelOutput]:
    if depth > _MAX_DEPTH or call in visiting:
        return []
    visiting = visiting | {call}
    kind = _model_kind(ctx, call)
    if kind == "sequential":
        return _sequential_outputs(ctx, call, depth, visiting)
    if kind == "functional":
        result = []
        for expr in _flatten(ctx, _functional_outputs_arg(call), depth):
            result += tensor_sources(ctx, expr, "output of functional Model(inputs, outputs)", depth + 1, visiting)
        return result
    if kind == "application":
        return [ModelOutput(call, "classifier of a keras.applications model")]
    if kind == "subclass":
        cls = ctx.custom_layer_classes[call.func.id]  # type: ignore[attr-defined]
        return _subclass_outputs(ctx, cls, depth + 1, visiting)
    return []


def _sequential_outputs(ctx: StaticContext, call: ast.Call, depth: int, visiting: frozenset) -> list[ModelOutput]:
    target = _bound_name(ctx, call)
    if target is not None:
        adds, popped = _adds_after(ctx, call, target)
        if popped:
            return []
        if adds:
            result = []
            for add in adds:
                if add.args and not isinstance(add.args[0], ast.Starred):
                    result += _element_outputs(
                        ctx, add.args[0], f"last {target}.add(...) of a Sequential model", depth + 1, visiting
                    )
            return result
    elements = _sequential_elements(ctx, call, depth)
    if not elements:
        return []
    return _element_outputs(ctx, elements[-1], "last layer of Sequential([...])", depth + 1, visiting)


def _bound_name(ctx: StaticContext, node: ast.AST) -> str | None:
    """`model` / `self.model` when `node` is the whole right-hand side of a single-target assignment."""
    parent = ctx.parents.get(node)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and parent.value is node:
        return dotted_name(parent.targets[0])
    if isinstance(parent, ast.AnnAssign) and parent.value is node:
        return dotted_name(parent.target)
    return None


def _sequential_elements(ctx: StaticContext, call: ast.Call, depth: int) -> list[ast.AST] | None:
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "layers"), None)
    return _list_elements(ctx, arg, depth)


def _list_elements(ctx: StaticContext, expr: ast.AST | None, depth: int) -> list[ast.AST] | None:
    """Elements of a list/tuple literal (through names, `a + [b]`); None when unknown or mutated."""
    if expr is None or depth > _MAX_DEPTH:
        return None
    if isinstance(expr, (ast.List, ast.Tuple)):
        if any(isinstance(e, ast.Starred) for e in expr.elts[-1:]):
            return None
        return list(expr.elts)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        right = _list_elements(ctx, expr.right, depth + 1)
        if right:
            return right
        return _list_elements(ctx, expr.left, depth + 1) if right == [] else None
    if isinstance(expr, ast.Name):
        scope = ctx.enclosing_function(expr) or ctx.tree
        for node in ctx.walk_scope(scope):
            if isinstance(node, ast.AugAssign) and dotted_name(node.target) == expr.id:
                return None
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _LIST_MUTATORS
                and dotted_name(node.func.value) == expr.id
            ):
                return None
        value = ctx.last_assignment(expr.id, expr)
        return _list_elements(ctx, value, depth + 1) if value is not None else None
    return None


def _adds_after(ctx: StaticContext, call: ast.Call, target: str) -> tuple[list[ast.Call], bool]:
    """The `target.add(...)` calls that may be the last one executed after the constructor `call`, and whether
    the model is `.pop()`-ed. Only statements of the constructor's own function (or module) count."""
    scope = ctx.enclosing_function(call) or ctx.tree
    start = (call.lineno, call.col_offset)
    stop = None  # the next rebinding of `target` in this scope ends this model's adds
    for node in ctx.walk_scope(scope):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and (node.lineno, node.col_offset) > start:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(dotted_name(t) == target for t in targets):
                stop = min(stop or (node.lineno, 0), (node.lineno, 0))
    popped = False
    for node in ctx.walk_scope(scope):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "pop"
            and dotted_name(node.func.value) == target
            and _within(node, start, stop)
        ):
            popped = True

    def pick(c: ast.Call) -> bool:
        return (
            isinstance(c.func, ast.Attribute)
            and c.func.attr == "add"
            and dotted_name(c.func.value) == target
            and _within(c, start, stop)
        )

    body = scope.body  # type: ignore[attr-defined]
    tails, _ = _tail_calls(body, pick)
    return tails, popped


def _within(node: ast.AST, start: tuple[int, int], stop: tuple[int, int] | None) -> bool:
    pos = (node.lineno, node.col_offset)
    return pos > start and (stop is None or pos < stop)


def _tail_calls(stmts: list[ast.stmt], pick) -> tuple[list[ast.Call], bool]:
    """Expression-statement calls selected by `pick` that may be the last such call executed in `stmts`, and
    whether one of them certainly runs. Branches of an `if` each contribute; a loop body may not run, so what
    precedes it still counts."""
    found: list[ast.Call] = []
    for stmt in reversed(stmts):
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and pick(stmt.value):
            return found + [stmt.value], True
        if isinstance(stmt, ast.If):
            a, a_certain = _tail_calls(stmt.body, pick)
            b, b_certain = _tail_calls(stmt.orelse, pick)
            found += a + b
            if a_certain and b_certain:
                return found, True
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            b, b_certain = _tail_calls(stmt.orelse, pick)
            found += b
            if b_certain:
                return found, True
            a, _ = _tail_calls(stmt.body, pick)
            found += a
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            a, a_certain = _tail_calls(stmt.body, pick)
            found += a
            if a_certain:
                return found, True
        elif isinstance(stmt, ast.Try):
            f, f_certain = _tail_calls(stmt.finalbody, pick)
            found += f
            if f_certain:
                return found, True
            for handler in stmt.handlers:
                found += _tail_calls(handler.body, pick)[0]
            a, a_certain = _tail_calls(stmt.body + stmt.orelse, pick)
            found += a
            if a_certain:
                return found, True
    return found, False


def _element_outputs(
    ctx: StaticContext, element: ast.AST, how: str, depth: int, visiting: frozenset
) -> list[ModelOutput]:
    """The output(s) of a layer-list element: a layer, a name bound to one, or a nested model."""
    return _constructed_outputs(ctx, _constructor_of(ctx, element, depth), how, depth, visiting)


def _constructed_outputs(
    ctx: StaticContext, constructor: ast.Call | None, how: str, depth: int, visiting: frozenset
) -> list[ModelOutput]:
    """The output(s) of the object a constructor call builds: that layer, or a nested model's outputs."""
    if constructor is None:
        return []
    if _model_kind(ctx, constructor):
        return _model_outputs(ctx, constructor, depth + 1, visiting)
    layer = ctx.layer_call(constructor)
    if layer is None or layer.qualname in INPUT_LAYERS:
        return []
    return [ModelOutput(layer, how)]


def _constructor_of(ctx: StaticContext, expr: ast.AST | None, depth: int) -> ast.Call | None:
    """The call that constructed the object `expr` denotes (through names and `self.<attr>`)."""
    if expr is None or depth > _MAX_DEPTH:
        return None
    if isinstance(expr, ast.Call):
        return expr
    if isinstance(expr, ast.Name):
        return _constructor_of(ctx, ctx.last_assignment(expr.id, expr), depth + 1)
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        return _constructor_of(ctx, ctx.self_attribute(expr, expr.attr), depth + 1)
    return None


def _flatten(ctx: StaticContext, expr: ast.AST | None, depth: int) -> list[ast.AST]:
    """Output tensor expressions of an `outputs=` value: list/tuple/dict literals, possibly behind a name."""
    if expr is None or depth > _MAX_DEPTH:
        return []
    if isinstance(expr, (ast.List, ast.Tuple)):
        return [t for e in expr.elts if not isinstance(e, ast.Starred) for t in _flatten(ctx, e, depth + 1)]
    if isinstance(expr, ast.Dict):
        return [t for v in expr.values for t in _flatten(ctx, v, depth + 1)]
    if isinstance(expr, ast.Name):
        value = ctx.last_assignment(expr.id, expr)
        if isinstance(value, (ast.List, ast.Tuple, ast.Dict)):
            return _flatten(ctx, value, depth + 1)
    return [expr]


def tensor_sources(
    ctx: StaticContext, expr: ast.AST | None, how: str, depth: int, visiting: frozenset
) -> list[ModelOutput]:
    """What produced the tensor `expr`: a layer constructor, an activation op, or a nested model's outputs."""
    if expr is None or depth > _MAX_DEPTH:
        return []
    if isinstance(expr, ast.Name):
        return tensor_sources(ctx, ctx.last_assignment(expr.id, expr), how, depth + 1, visiting)
    if not isinstance(expr, ast.Call):
        return []
    if activation_op(ctx, expr):
        return [ModelOutput(expr, how)]
    helper = _local_function(ctx, expr.func)
    if helper is not None:  # `outputs = classification_head(x, 10)`: what the helper returns
        if helper in visiting:
            return []
        return [
            out
            for node in ctx.walk_scope(helper)
            if isinstance(node, ast.Return) and node.value is not None
            for e in _flatten(ctx, node.value, depth + 1)
            for out in tensor_sources(ctx, e, how, depth + 1, visiting | {helper})
        ]
    return _constructed_outputs(ctx, _constructor_of(ctx, expr.func, depth + 1), how, depth, visiting)


def _local_function(ctx: StaticContext, func: ast.AST) -> ast.FunctionDef | None:
    """A module-level function of this file called by name (not a class, not an import)."""
    if not isinstance(func, ast.Name) or ctx.resolve(func) is not None:
        return None
    for stmt in ctx.tree.body:
        if isinstance(stmt, FUNCTION_NODES) and stmt.name == func.id:
            return stmt  # type: ignore[return-value]
    return None


def _subclass_outputs(ctx: StaticContext, cls: ast.ClassDef, depth: int, visiting: frozenset) -> list[ModelOutput]:
    if depth > _MAX_DEPTH or cls in visiting:
        return []
    visiting = visiting | {cls}
    call = next((s for s in cls.body if isinstance(s, FUNCTION_NODES) and s.name == "call"), None)
    if call is None:
        return []
    how = f"returned by {cls.name}.call"
    result = []
    for node in ctx.walk_scope(call):
        if isinstance(node, ast.Return) and node.value is not None:
            for expr in _flatten(ctx, node.value, depth):
                result += tensor_sources(ctx, expr, how, depth + 1, visiting)
    return result


def layer_inputs(ctx: StaticContext, layer: LayerRecord) -> list[LayerRecord]:
    """The layer constructors whose output the layer built by `layer` is applied to: the argument of
    `Activation(...)(x)` / `act(x)` with `act = Activation(...)`, the previous element of a `Sequential([...])`
    list, or the layer of the `model.add(...)` statement just before. Empty when unknown."""
    node = layer.node
    parent = ctx.parents.get(node)
    if isinstance(parent, ast.Call) and parent.func is node and parent.args:
        producer = ctx.producer(parent.args[0])
        return [producer] if producer else []
    if isinstance(parent, (ast.List, ast.Tuple)):
        index = next(i for i, e in enumerate(parent.elts) if e is node)
        return _layer_before(ctx, parent.elts[index - 1] if index > 0 else None)
    if _is_add(parent) and isinstance(ctx.parents.get(parent), ast.Expr):
        return _layer_added_before(ctx, parent)
    name = _bound_name(ctx, node)
    return [] if name is None else _inputs_of_calls(ctx, node, name)


def _layer_before(ctx: StaticContext, element: ast.AST | None) -> list[LayerRecord]:
    """The layer `element` builds, unless it is none or an input layer."""
    previous = ctx.layer_instance(element) if element is not None else None
    return [previous] if previous and previous.qualname not in INPUT_LAYERS else []


def _is_add(node: ast.AST | None) -> TypeGuard[ast.Call]:
    """`<model>.add(...)`."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add"


def _layer_added_before(ctx: StaticContext, add: ast.Call) -> list[LayerRecord]:
    """For `model.add(layer)`, the layer the statement just before adds to the same model."""
    statement = ctx.parents[add]
    block = ctx.parents[statement]
    body: list[ast.stmt] = next(
        (getattr(block, f) for f in ("body", "orelse", "finalbody") if statement in getattr(block, f, [])), []
    )
    index = next((i for i, s in enumerate(body) if s is statement), 0)
    before = body[index - 1] if index > 0 else None
    if (
        isinstance(before, ast.Expr)
        and _is_add(before.value)
        and dotted_name(before.value.func.value) == dotted_name(add.func.value)  # type: ignore[attr-defined]
        and before.value.args  # type: ignore[attr-defined]
    ):
        return _layer_before(ctx, before.value.args[0])  # type: ignore[attr-defined]
    return []


def _inputs_of_calls(ctx: StaticContext, node: ast.AST, name: str) -> list[LayerRecord]:
    """`act = Activation(...)` then `act(x)` in the same scope: the producers of each call's input."""
    found: list[LayerRecord] = []
    scope = ctx.enclosing_function(node) or ctx.tree
    for use in ctx.walk_scope(scope):
        if isinstance(use, ast.Call) and dotted_name(use.func) == name and use.args:
            producer = ctx.producer(use.args[0])
            if producer:
                found.append(producer)
    return found


def _is_submodel(ctx: StaticContext, node: ast.AST, depth: int) -> bool:
    """True when the model built by `node` is used as a block of another model rather than as a model itself."""
    if depth > 4:
        return False
    parent = ctx.parents.get(node)
    if isinstance(parent, ast.Call):
        if parent.func is node:
            return True  # `Sequential([...])(x)`
        is_add = isinstance(parent.func, ast.Attribute) and parent.func.attr == "add"
        return is_add or ctx.layer_call(parent) is not None or bool(_model_kind(ctx, parent))
    if isinstance(parent, (ast.List, ast.Tuple)):
        return True  # an element of a layer list
    name = _bound_name(ctx, node)
    if name is not None:
        if name.startswith("self."):
            cls = ctx.enclosing_class(node)
            return cls is not None and cls.name in ctx.custom_layer_classes
        return _name_used_as_layer(ctx, node, name)
    if isinstance(parent, ast.Return):
        function = ctx.enclosing_function(node)
        if function is None or ctx.enclosing_class(function) is not None:
            return False
        name = function.name  # type: ignore[attr-defined]
        sites = ctx.calls_to(name)
        return bool(sites) and all(_is_submodel(ctx, site, depth + 1) for site in sites)
    return False


def _name_used_as_layer(ctx: StaticContext, node: ast.AST, name: str) -> bool:
    scope = ctx.enclosing_function(node)
    region = ctx.nodes if scope is None else ctx.walk_scope(scope)
    as_layer = False
    for use in region:
        if not (isinstance(use, ast.Name) and use.id == name and isinstance(use.ctx, ast.Load)):
            continue
        parent = ctx.parents.get(use)
        if isinstance(parent, ast.Attribute) and parent.attr in _MODEL_USES:
            return False
        if (
            (isinstance(parent, ast.Call) and parent.func is use)
            or isinstance(parent, (ast.List, ast.Tuple))
            or (
                isinstance(parent, ast.Call)
                and (
                    ctx.layer_call(parent)
                    or _model_kind(ctx, parent)
                    or (isinstance(parent.func, ast.Attribute) and parent.func.attr == "add")
                )
            )
        ):
            as_layer = True
    return as_layer


def is_application(ctx: StaticContext, call: ast.Call) -> bool:
    """`keras.applications.ResNet50(...)`, `tf.keras.applications.mobilenet_v2.MobileNetV2(...)`."""
    name = ctx.call_name(call) or ""
    return name.startswith("keras.applications.") and name.rsplit(".", 1)[-1][:1].isupper()
