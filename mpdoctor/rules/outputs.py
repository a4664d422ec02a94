"""MP4xx, model outputs: MP401 (static + trace), MP402, MP404, MP405 (trace only, documented here; their checks
are in rules/numerics.py).

Also home of :func:`model_output_layers`, the static answer to "which layer produces a model output?", shared with
the perf rules (MP601 skips output layers) and meant for MP402/MP503.
"""

from __future__ import annotations

import ast
import weakref
from typing import Iterable, NamedTuple

from mpdoctor.diagnostics import Confidence, Diagnostic, Fix
from mpdoctor.registry import define_rule, static_check, trace_check
from mpdoctor.static.astutil import binds
from mpdoctor.static.context import FUNCTION_NODES, LayerCall, StaticContext
from mpdoctor.static.names import dotted_name
from mpdoctor.static.policies import is_float16_compute
from mpdoctor.trace.context import TraceContext
from mpdoctor.trace.facts import graphs, low_precision

define_rule(
    "MP401", "float16-output-activation", "error", "ST", True,
    summary="A model output is a softmax / sigmoid / log_softmax / exp computed in float16.",
    what="""
        A model output is produced by softmax, sigmoid, log_softmax or exp (a `Softmax` layer, an `Activation`
        layer, or `activation=` on Dense/Conv/RNN layers, or a `softmax`/`sigmoid` op applied to the last layer)
        whose compute dtype is float16 or bfloat16: the global policy is `mixed_float16`/`mixed_bfloat16`/
        `float16`/`bfloat16` and the layer has no `dtype="float32"`. Also raised at a `keras.applications`
        constructor (`ResNet50(...)`, `MobileNetV2(...)`) built with the default `include_top=True` and
        `classifier_activation="softmax"` under a float16 policy: its `predictions` Dense is float16 too.

        The static pass finds the output layer as the last element of `Sequential([...])`, the last
        `model.add(...)` of a Sequential (every branch of an `if`), the `outputs` of a functional
        `Model(inputs, outputs)` (list and dict outputs, tensors returned by a helper function), what the `call`
        of a `keras.Model` subclass returns, the inner layer of `TimeDistributed(...)`, and nested models used as
        the last block. Softmax in hidden layers and in models used as blocks of another model (attention
        weights, squeeze-and-excitation gates) is not reported, nor are activations passed as variables whose
        value the static pass cannot see. It does not look through a cast or `Activation("linear",
        dtype="float32")` placed after a float16 softmax (the damage is already done there; the trace pass sees
        the values).
        """,
    why="""
        Under a float16 policy the last Dense computes its logits AND its activation in float16: logits whose
        matmul exceeds 65504 become inf and softmax returns NaN; probabilities below 6e-8 flush to 0 and sigmoid
        saturates to exactly 1.0, so the cross-entropy sees log(0) (clipped to a wrong constant) and the gradient
        of confident mistakes is lost. The model output (and the loss and metrics computed from it) is float16.
        Measured on TF 2.21 with both Keras 2 and Keras 3: `Dense(3, activation="softmax")` under
        `mixed_float16` returns NaN for inputs of 3e4, and `softmax([0, 20])` gives `[0.0, 1.0]` instead of
        `[2.1e-09, 1.0]`; with `dtype="float32"` on that layer both are correct. The TensorFlow mixed precision
        guide asks for the output softmax in float32 for this reason.
        """,
    bad="""
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.Input((784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),       # softmax in float16
        ])
        """,
    good="""
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.Input((784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10),
            keras.layers.Activation("softmax", dtype="float32"),   # or Dense(10, activation="softmax", dtype="float32")
        ])
        """,
    fix="""
        Adds `dtype="float32"` to the output layer (replacing a float16 `dtype=` if present), so the layer runs its
        matmul and activation in float32 and returns float32; for a `tf.nn.softmax`/`keras.ops.softmax` op applied
        to the last layer, the `dtype="float32"` goes on that layer. For `TimeDistributed(Dense(...))` it goes on
        both layers (measured: Keras 3 follows the wrapper's dtype, tf_keras the inner layer's). Safe: only the
        last layer leaves float16 and its cost is negligible. For `keras.applications` models there is no
        autofix: build with `include_top=False` and add your own head with a float32 output, or pass
        `classifier_activation=None` and append `keras.layers.Activation("softmax", dtype="float32")`.
        """,
)

define_rule(
    "MP402", "float16-model-output", "warning", "T", True,
    summary="A model output tensor is float16 (loss and metrics then run in float16).",
    what="""
        The trace pass builds the model and finds an output tensor whose dtype is float16 or bfloat16 that MP401
        does not already explain (typically a linear `Dense(n)` head under `mixed_float16`, a regression output,
        or logits used with `from_logits=True`).
        """,
    why="""
        Keras computes the loss and metrics on the output tensor. In float16 a regression target above 65504 (or
        its square in MSE) overflows, small errors lose precision (float16 has ~3 decimal digits), and
        accumulating metrics drift. Exported models expose a float16 output that consumers do not expect
        (see MP203). The mixed precision guide recommends float32 model outputs.
        """,
    bad="""
        keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = keras.Input((64,))
        x = keras.layers.Dense(128, activation="relu")(inputs)
        outputs = keras.layers.Dense(1)(x)          # float16 output
        model = keras.Model(inputs, outputs)
        """,
    good="""
        keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = keras.Input((64,))
        x = keras.layers.Dense(128, activation="relu")(inputs)
        x = keras.layers.Dense(1)(x)
        outputs = keras.layers.Activation("linear", dtype="float32")(x)
        model = keras.Model(inputs, outputs)
        """,
    fix="""
        Appends `Activation("linear", dtype="float32")` to that output (or adds `dtype="float32"` to the output
        layer), which casts the result to float32 at negligible cost.
        """,
)

define_rule(
    "MP404", "non-finite-activation", "error", "T", False,
    summary="A layer output becomes inf/NaN under the float16 policy but stays finite in float32.",
    what="""
        The trace pass runs a sample batch through the model twice, once under the file's float16 policy and
        once with every layer switched to float32 (same weights: `mixed_*` variables are float32), and names the
        FIRST layer (in topological order: the order its call returns, so layers inside a nested model or custom
        block come before the block) whose output contains inf or NaN in float16 while the float32 run stays
        finite, with the op that produced the first inf/NaN (`Rsqrt`, `Exp`, `AddV2`, `Mul`...: that layer is
        re-run on its float16 inputs under `tf.debugging.enable_check_numerics`).

        The sample batch is built from the model's input specs: float inputs uniform in `sample-range` (default
        [0, 1), seeded by `sample-seed`), integers zero; `--sample FILE.npz` supplies your own (e.g. padded or
        constant rows that a random batch never has). Built-in layers that compute their statistics in float32
        (LayerNormalization, BatchNormalization with `epsilon=1e-12`) stay finite and are not reported.
        """,
    why="""
        float16 overflows at 65504. A large matmul, an exp, a square or a sum over a long axis that is finite in
        float32 becomes inf in float16, and inf turns into NaN at the next subtraction or normalisation; from
        there every layer, the loss and the gradients are NaN. Loss scaling cannot help with forward overflow.
        The first layer that breaks is the one to fix; everything after it is collateral.
        """,
    bad="""
        keras.mixed_precision.set_global_policy("mixed_float16")
        x = keras.layers.Dense(4096)(inputs)                     # activations around 1e3
        x = keras.layers.Lambda(lambda t: tf.reduce_sum(t * t, axis=-1, keepdims=True))(x)   # inf in float16
        """,
    good="""
        keras.mixed_precision.set_global_policy("mixed_float16")
        x = keras.layers.Dense(4096)(inputs)
        x = keras.layers.Lambda(lambda t: tf.reduce_sum(tf.square(tf.cast(t, tf.float32)), axis=-1, keepdims=True),
                                dtype="float32")(x)
        """,
    fix="""
        No autofix: give the named layer `dtype="float32"`, compute the overflowing op in float32, or rescale its
        input (normalise before the sum, subtract the max before exp).
        """,
)

define_rule(
    "MP405", "precision-divergence", "warning", "T", False,
    summary="Layer-wise float16 vs float32 relative error on a sample batch exceeds a threshold.",
    what="""
        The trace pass compares every layer's output between a float16-policy run and a float32 run with the same
        weights on a sample batch (like Polygraphy's layer-wise comparison) and names the first layer whose
        relative error exceeds `numerics-threshold` (default 0.05), with the error of its inputs, how many later
        layers stay above the threshold and the error of the last layer. Outputs that are non-finite are MP404.

        Relative error = max |y16 - y32| / max |y32| over the layer's output (compared on a strided sample of at
        most 65,536 elements for larger outputs): the worst element error as a fraction of the layer's range, so
        near-zero activations (ReLU zeros) cannot inflate it. Default 0.05: float16 rounds to 2^-11 (~0.05 %) and
        measured errors on ResNet50 and MobileNetV2 (`weights=None`, mixed_float16, 224x224 batch in [0, 1))
        stay at or below 0.2-0.4 % per layer, so 5 % leaves a 10x margin while cancellation bugs give 10-100 %.
        Layers whose float32 output never reaches float16's smallest normal number (6.1e-5) are not judged: that
        is underflow (only subnormals left), which untrained networks in inference mode reach. Under bfloat16 (8
        significand bits instead of 11) the threshold is multiplied by 8 (0.4 by default; measured: up to 1.3-2.1 %
        per layer on the same models) and every layer is judged (bfloat16 has float32's exponent range).
        """,
    why="""
        float16 keeps about 3 significant decimal digits (bfloat16 about 2). Layers that subtract nearly equal
        numbers (variance, normalisation by hand, differences of large activations), accumulate long sums or
        exponentiate amplify that rounding; the model still runs but its outputs differ from float32 enough to
        change predictions or to stall training. Knowing where the error enters tells you which layer to keep in
        float32.
        """,
    bad="""
        keras.mixed_precision.set_global_policy("mixed_float16")
        # hand-written variance: E[x^2] - E[x]^2 cancels catastrophically in float16
        var = keras.layers.Lambda(lambda t: tf.reduce_mean(t * t, -1) - tf.square(tf.reduce_mean(t, -1)))(x)
        """,
    good="""
        keras.mixed_precision.set_global_policy("mixed_float16")
        x = keras.layers.LayerNormalization()(x)   # Keras computes the statistics in float32
        """,
    fix="""
        No autofix: set `dtype="float32"` on the named layer, or use a numerically stable formulation (built-in
        normalisation layers compute their statistics in float32).
        """,
)


# ======================================================================================= which layers are outputs

class ModelOutput(NamedTuple):
    """A construct that produces a model output tensor.

    `layer` is a :class:`LayerCall` (the constructor of the output layer), or an `ast.Call` that is either an
    activation op applied to the last layer's output (`tf.nn.softmax(logits)`, see :func:`activation_op`) or a
    `keras.applications.<Arch>(...)` constructor (the model's own classifier is the output). `how` says, in
    words fit for a message, how the static pass knows it is an output ("last layer of Sequential([...])").
    """

    layer: LayerCall | ast.Call
    how: str

    @property
    def node(self) -> ast.Call:
        return self.layer.node if isinstance(self.layer, LayerCall) else self.layer


_SEQUENTIAL = ("keras.Sequential", "keras.models.Sequential", "keras.models.sequential.Sequential",
               "keras.engine.sequential.Sequential")
_FUNCTIONAL = ("keras.Model", "keras.models.Model", "keras.models.model.Model", "keras.engine.training.Model",
               "keras.models.functional.Functional", "keras.engine.functional.Functional")
_INPUTS = ("keras.Input", "keras.layers.Input", "keras.layers.InputLayer")
_WRAPPERS = ("TimeDistributed", "Bidirectional")
# Attributes only a model (not a sub-block) is used through: evidence a Sequential/Model is the top-level model.
_MODEL_USES = frozenset({"compile", "fit", "evaluate", "predict", "predict_on_batch", "train_on_batch",
                         "test_on_batch", "save", "save_weights", "load_weights", "export", "summary",
                         "trainable_variables", "trainable_weights", "fit_generator"})
_LIST_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "__setitem__"})
_MAX_DEPTH = 8

_cache: "weakref.WeakKeyDictionary[StaticContext, list[ModelOutput]]" = weakref.WeakKeyDictionary()


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
    cached = _cache.get(ctx)
    if cached is not None:
        return cached
    found: dict[ast.AST, ModelOutput] = {}
    for call in ctx.calls:
        if _model_kind(ctx, call) and not _is_submodel(ctx, call, 0):
            for out in _model_outputs(ctx, call, 0, frozenset()):
                found.setdefault(out.node, out)
    for name, cls in ctx.custom_layer_classes.items():
        if not ctx.is_custom_model(cls):
            continue
        sites = [lc.node for lc in ctx._construction_sites(name) if lc.qualname == name]
        if sites and all(_is_submodel(ctx, site, 0) for site in sites):
            continue
        for out in _subclass_outputs(ctx, cls, 0, frozenset()):
            found.setdefault(out.node, out)
    result = sorted(found.values(), key=lambda o: (o.node.lineno, o.node.col_offset))
    _cache[ctx] = result
    return result


def _model_kind(ctx: StaticContext, call: ast.Call) -> str | None:
    """'sequential', 'functional', 'application' or 'subclass' for a model constructor call, else None."""
    name = ctx.call_name(call)
    if name in _SEQUENTIAL:
        return "sequential"
    if name in _FUNCTIONAL:
        return "functional" if _functional_outputs_arg(call) is not None else None
    if name and _is_application_name(name):
        return "application"
    if _is_super_init(ctx, call) and _functional_outputs_arg(call) is not None:
        return "functional"
    if isinstance(call.func, ast.Name) and call.func.id in ctx.custom_layer_classes:
        if ctx.is_custom_model(ctx.custom_layer_classes[call.func.id]):
            return "subclass"
    return None


def _is_application_name(name: str) -> bool:
    parts = name.split(".")
    return (len(parts) in (3, 4) and parts[0] == "keras" and parts[1] == "applications"
            and parts[-1][:1].isupper())


def _is_super_init(ctx: StaticContext, call: ast.Call) -> bool:
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "__init__" and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Name) and func.value.func.id == "super"):
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
            result += _tensor_sources(ctx, expr, "output of functional Model(inputs, outputs)", depth + 1, visiting)
        return result
    if kind == "application":
        return [ModelOutput(call, "classifier of a keras.applications model")]
    if kind == "subclass":
        cls = ctx.custom_layer_classes[call.func.id]  # type: ignore[attr-defined]
        return _subclass_outputs(ctx, cls, depth + 1, visiting)
    return []


# ---------------------------------------------------------------- Sequential

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
                    result += _element_outputs(ctx, add.args[0], f"last {target}.add(...) of a Sequential model",
                                               depth + 1, visiting)
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
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in _LIST_MUTATORS and dotted_name(node.func.value) == expr.id):
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
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "pop"
                and dotted_name(node.func.value) == target and _within(node, start, stop)):
            popped = True

    def pick(c: ast.Call) -> bool:
        return (isinstance(c.func, ast.Attribute) and c.func.attr == "add" and dotted_name(c.func.value) == target
                and _within(c, start, stop))

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


def _element_outputs(ctx: StaticContext, element: ast.AST, how: str, depth: int,
                     visiting: frozenset) -> list[ModelOutput]:
    """The output(s) of a layer-list element: a layer, a name bound to one, or a nested model."""
    return _constructed_outputs(ctx, _constructor_of(ctx, element, depth), how, depth, visiting)


def _constructed_outputs(ctx: StaticContext, constructor: ast.Call | None, how: str, depth: int,
                         visiting: frozenset) -> list[ModelOutput]:
    """The output(s) of the object a constructor call builds: that layer, or a nested model's outputs."""
    if constructor is None:
        return []
    if _model_kind(ctx, constructor):
        return _model_outputs(ctx, constructor, depth + 1, visiting)
    layer = ctx.layer_call(constructor)
    if layer is None or layer.qualname in _INPUTS:
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


# ---------------------------------------------------------------- functional and subclassed

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


def _tensor_sources(ctx: StaticContext, expr: ast.AST | None, how: str, depth: int,
                    visiting: frozenset) -> list[ModelOutput]:
    """What produced the tensor `expr`: a layer constructor, an activation op, or a nested model's outputs."""
    if expr is None or depth > _MAX_DEPTH:
        return []
    if isinstance(expr, ast.Name):
        return _tensor_sources(ctx, ctx.last_assignment(expr.id, expr), how, depth + 1, visiting)
    if not isinstance(expr, ast.Call):
        return []
    if activation_op(ctx, expr):
        return [ModelOutput(expr, how)]
    helper = _local_function(ctx, expr.func)
    if helper is not None:  # `outputs = classification_head(x, 10)`: what the helper returns
        if helper in visiting:
            return []
        return [out for node in ctx.walk_scope(helper) if isinstance(node, ast.Return) and node.value is not None
                for e in _flatten(ctx, node.value, depth + 1)
                for out in _tensor_sources(ctx, e, how, depth + 1, visiting | {helper})]
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
                result += _tensor_sources(ctx, expr, how, depth + 1, visiting)
    return result


# Layers without weights that keep the size of their input: the layer before them fixes the output size.
PASS_THROUGH_LAYERS = frozenset({"Activation", "Softmax", "ReLU", "LeakyReLU", "ELU", "PReLU", "Identity", "Dropout",
                                 "Reshape", "Flatten", "Lambda"})


def layer_inputs(ctx: StaticContext, layer: LayerCall) -> list[LayerCall]:
    """The layer constructors whose output the layer built by `layer` is applied to: the argument of
    `Activation(...)(x)` / `act(x)` with `act = Activation(...)`, the previous element of a `Sequential([...])`
    list, or the layer of the `model.add(...)` statement just before. Empty when unknown."""
    node = layer.node
    parent = ctx.parents.get(node)
    found: list[LayerCall] = []
    if isinstance(parent, ast.Call) and parent.func is node and parent.args:
        producer = ctx.producer(parent.args[0])
        return [producer] if producer else []
    if isinstance(parent, (ast.List, ast.Tuple)):
        index = next(i for i, e in enumerate(parent.elts) if e is node)
        previous = ctx.layer_instance(parent.elts[index - 1]) if index > 0 else None
        return [previous] if previous and previous.qualname not in _INPUTS else []
    if (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and parent.func.attr == "add"
            and isinstance(ctx.parents.get(parent), ast.Expr)):
        statement = ctx.parents[parent]
        body = next((getattr(ctx.parents[statement], f) for f in ("body", "orelse", "finalbody")
                     if statement in getattr(ctx.parents[statement], f, [])), [])
        index = next((i for i, s in enumerate(body) if s is statement), 0)
        before = body[index - 1] if index > 0 else None
        if (isinstance(before, ast.Expr) and isinstance(before.value, ast.Call)
                and isinstance(before.value.func, ast.Attribute) and before.value.func.attr == "add"
                and dotted_name(before.value.func.value) == dotted_name(parent.func.value) and before.value.args):
            previous = ctx.layer_instance(before.value.args[0])
            return [previous] if previous and previous.qualname not in _INPUTS else []
        return []
    name = _bound_name(ctx, node)
    if name is not None:  # `act = Activation(...)` then `act(x)` in the same scope
        scope = ctx.enclosing_function(node) or ctx.tree
        for use in ctx.walk_scope(scope):
            if isinstance(use, ast.Call) and dotted_name(use.func) == name and use.args:
                producer = ctx.producer(use.args[0])
                if producer:
                    found.append(producer)
    return found


# ---------------------------------------------------------------- is this model a block of another one?

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
        if isinstance(parent, ast.Call) and parent.func is use:
            as_layer = True
        elif isinstance(parent, (ast.List, ast.Tuple)) or (
                isinstance(parent, ast.Call) and (ctx.layer_call(parent) or _model_kind(ctx, parent)
                                                  or (isinstance(parent.func, ast.Attribute)
                                                      and parent.func.attr == "add"))):
            as_layer = True
    return as_layer


# ======================================================================================= MP401

_ACTIVATION_STRINGS = {"softmax": "softmax", "log_softmax": "log_softmax", "sigmoid": "sigmoid",
                       "exponential": "exp"}
_ACTIVATION_FUNCTIONS = {"softmax": "softmax", "log_softmax": "log_softmax", "sigmoid": "sigmoid",
                         "exponential": "exp", "exp": "exp"}
_ACTIVATION_MODULES = ("tf.", "tf.nn.", "tf.math.", "keras.activations.", "keras.ops.", "keras.backend.",
                       "keras.ops.nn.")


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


def _activation_value(ctx: StaticContext, expr: ast.AST | None, depth: int = 0) -> str | None:
    if expr is None or depth > 4:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return _ACTIVATION_STRINGS.get(expr.value.lower())
    if isinstance(expr, ast.Name) and ctx.resolve(expr) is None and expr.id in ctx.module_constants:
        function = ctx.enclosing_function(expr)
        if function is None or not binds(function, expr.id):
            return _activation_value(ctx, ctx.module_constants[expr.id], depth + 1)
        return None
    return _activation_function(ctx.resolve(expr))


def layer_activation(ctx: StaticContext, layer: LayerCall) -> str | None:
    """The risky activation (softmax, log_softmax, sigmoid, exp) a built-in layer applies last, else None."""
    if layer.custom:
        return None
    call, kind = layer.node, layer.kind
    if kind == "Softmax":
        return "softmax"
    keyword = next((k.value for k in call.keywords if k.arg == "activation"), None)
    if kind == "Activation":
        return _activation_value(ctx, call.args[0] if call.args else keyword)
    if keyword is None and kind == "Dense" and len(call.args) >= 2:
        keyword = call.args[1]
    return _activation_value(ctx, keyword)


def _wrapped_layer(ctx: StaticContext, layer: LayerCall) -> LayerCall | None:
    """The inner layer of `TimeDistributed(Dense(...))`."""
    if layer.custom or layer.kind not in _WRAPPERS:
        return None
    inner = layer.node.args[0] if layer.node.args else next(
        (k.value for k in layer.node.keywords if k.arg == "layer"), None)
    return ctx.layer_instance(inner) if inner is not None else None


def policy_confidence(policies: Iterable[str | None]) -> Confidence:
    """HIGH when every policy the node may run under is float16, MEDIUM when some run may be float32."""
    return Confidence.HIGH if all(is_float16_compute(p) for p in policies) else Confidence.MEDIUM


@static_check("MP401")
def check_float16_output_activation(ctx: StaticContext) -> Iterable[Diagnostic]:
    if not ctx.any_float16_policy:
        return
    for out in model_output_layers(ctx):
        if isinstance(out.layer, LayerCall):
            yield from _check_output_layer(ctx, out.layer, out.how)
        elif activation_op(ctx, out.layer):
            yield from _check_output_op(ctx, out.layer, out.how)
        else:
            yield from _check_application(ctx, out.layer)


def _check_output_layer(ctx: StaticContext, layer: LayerCall, how: str) -> Iterable[Diagnostic]:
    inner = _wrapped_layer(ctx, layer)
    target = inner or layer
    activation = layer_activation(ctx, target)
    if activation is None:
        return
    # A wrapper (`TimeDistributed(Dense(..., activation="softmax"))`): measured on TF 2.21, Keras 3 computes the
    # inner layer under the WRAPPER's dtype (inner dtype="float32" alone still gives float16 NaN), tf_keras under
    # the INNER layer's (wrapper dtype="float32" alone still NaN). The fix sets both.
    governing = layer if inner is not None and ctx.is_keras3 else target
    policies = ctx.layer_policies(governing)
    policy = ctx.float16_policy(policies)
    if policy is None:
        return
    edits = []
    for part in (target, layer) if inner is not None else (target,):
        if ctx.float16_policy(ctx.layer_policies(part)) or not _explicit_float32(ctx, part):
            edits += ctx.add_keyword_fix(part.node, "dtype", '"float32"', "").edits
    where = f"{target.kind} inside {layer.kind}" if inner is not None else target.kind
    yield ctx.diagnostic(
        "MP401", target.node,
        f"model output {where} ({how}) computes {activation} in {_dtype(policy)} under {policy}, "
        f"{_consequence(_dtype(policy), activation)}; set dtype=\"float32\" on "
        + ("both layers" if inner is not None else "it"),
        confidence=policy_confidence(policies),
        fix=Fix(f"compute the output {where} in float32", tuple(sorted(edits, key=lambda e: (e.line, e.column)))),
    )


def _explicit_float32(ctx: StaticContext, layer: LayerCall) -> bool:
    return any(p == "float32" for p in ctx.layer_policies(layer)) and len(ctx.layer_policies(layer)) == 1


def _consequence(dtype: str, activation: str) -> str:
    """What goes wrong, as measured on TF 2.21 (see the MP401 docs)."""
    if dtype == "bfloat16":
        return ("so with ~3 significant digits probabilities round to exactly 0 or 1 (bfloat16 sigmoid(6) is 1.0)"
                if activation != "exp" else "so the result keeps only ~3 significant digits")
    return {
        "softmax": "so logits beyond 65504 give NaN and probabilities below 6e-8 flush to 0",
        "log_softmax": "so logits beyond 65504 give NaN and log-probabilities keep only ~3 significant digits",
        "sigmoid": "so it returns exactly 1.0 for logits above ~8 and logits beyond 65504 give NaN",
        "exp": "so it overflows to inf for inputs above ~11",
    }[activation]


def _check_output_op(ctx: StaticContext, op: ast.Call, how: str) -> Iterable[Diagnostic]:
    name = ctx.call_name(op) or ""
    in_call_method = _in_call_method(ctx, op)
    if ctx.is_keras3 and name.startswith("tf.") and not in_call_method:
        return  # Keras 3 functional models reject TF ops on KerasTensors: the model does not build at all
    arg = op.args[0] if op.args else next((k.value for k in op.keywords if k.arg in ("x", "logits", "features")),
                                          None)
    sources = _tensor_sources(ctx, arg, how, 0, frozenset()) if arg is not None else []
    layers = [s.layer for s in sources if isinstance(s.layer, LayerCall)]
    if len(layers) != 1 or len(sources) != 1:
        return
    producer = layers[0]
    policies = ctx.layer_policies(producer)
    policy = ctx.float16_policy(policies)
    if policy is None:
        return
    fix = None
    if not producer.custom:
        fix = ctx.add_keyword_fix(producer.node, "dtype", '"float32"',
                                  f"compute {producer.kind} in float32 so {name.rsplit('.', 1)[-1]} gets float32")
    yield ctx.diagnostic(
        "MP401", op,
        f"model output {name} ({how}) runs in {_dtype(policy)}: it gets the {_dtype(policy)} output of "
        f"{producer.kind} under {policy}, {_consequence(_dtype(policy), activation_op(ctx, op) or 'softmax')}; "
        f"set dtype=\"float32\" on that {producer.kind}",
        confidence=policy_confidence(policies), fix=fix,
    )


def _check_application(ctx: StaticContext, call: ast.Call) -> Iterable[Diagnostic]:
    name = ctx.call_name(call) or ""
    arch = name.rsplit(".", 1)[-1]
    include_top = _application_argument(ctx, call, "include_top", arch)
    activation = _application_argument(ctx, call, "classifier_activation", arch)
    if include_top is _UNKNOWN or activation is _UNKNOWN:
        return
    if include_top is not None and not (isinstance(include_top, ast.Constant) and include_top.value is True):
        return
    act = "softmax" if activation is None else _activation_value(ctx, activation)
    if act is None:
        return
    policies = ctx.policies_at(call)
    policy = ctx.float16_policy(policies)
    if policy is None:
        return
    yield ctx.diagnostic(
        "MP401", call,
        f"{arch} with include_top=True ends in a {act} Dense ('predictions') computed in {_dtype(policy)} under "
        f"{policy}; use include_top=False with your own float32 output layer, or classifier_activation=None "
        f"followed by Activation(\"{act}\", dtype=\"float32\")",
        confidence=policy_confidence(policies),
    )


_UNKNOWN = object()
# Positional index of include_top where it is not the first parameter (Keras 2, Keras 3). Anything with more
# positional arguments than the index of classifier_activation (>= 6 everywhere) is left alone.
_INCLUDE_TOP_POSITION = {
    "MobileNet": (4, 4), "MobileNetV2": (2, 2), "MobileNetV3Small": (3, 3), "MobileNetV3Large": (3, 3),
    "NASNetMobile": (1, 1), "NASNetLarge": (1, 1),
    **{f"ConvNeXt{s}": (1, 0) for s in ("Tiny", "Small", "Base", "Large", "XLarge")},
}


def _application_argument(ctx: StaticContext, call: ast.Call, param: str, arch: str):
    """The expression given for `param`, None when left to its default, _UNKNOWN when it cannot be told."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return _UNKNOWN
    for kw in call.keywords:
        if kw.arg == param:
            return kw.value
    if param == "include_top":
        position = _INCLUDE_TOP_POSITION.get(arch, (0, 0))[1 if ctx.is_keras3 else 0]
        if arch.startswith("RegNet") and not ctx.is_keras3:
            position = 1
        return call.args[position] if len(call.args) > position else None
    return None if len(call.args) < 6 else _UNKNOWN


def _in_call_method(ctx: StaticContext, node: ast.AST) -> bool:
    function = ctx.enclosing_function(node)
    return (function is not None and function.name == "call"  # type: ignore[attr-defined]
            and ctx.enclosing_class(function) is not None)


def _dtype(policy: str) -> str:
    return policy.removeprefix("mixed_")


# ---------------------------------------------------------------- trace forms

_SATURATING = frozenset(_ACTIVATION_STRINGS.values())


def output_nodes(graph: dict):
    nodes = {n["id"]: n for n in graph.get("nodes", [])}
    for output in graph.get("outputs", []):
        node = nodes.get(output.get("node"))
        if node is not None:
            yield node, output


def saturating_activation(node: dict) -> str | None:
    activation = node.get("activation")
    if activation in _SATURATING:
        return activation
    if node.get("class") == "Softmax":
        return "softmax"
    return None


def float32_output_fix(ctx: TraceContext, node: dict) -> Fix | None:
    where = node.get("created_at") or {}
    call = ctx.call_at(where.get("line"), node.get("class", ""))
    if call is None or ctx.static is None or any(k.arg is None for k in call.keywords):
        return None
    return ctx.static.add_keyword_fix(call, "dtype", '"float32"', 'set dtype="float32" on the output layer')


@trace_check("MP401", "MP402")
def trace_float16_outputs(facts: dict, ctx: TraceContext) -> Iterable[Diagnostic]:
    """Model outputs observed as float16/bfloat16: MP401 when a saturating activation (softmax, sigmoid...)
    produced them in low precision, MP402 otherwise (unless MP503 reports that output: its compiled loss was seen
    computing in float16)."""
    from mpdoctor.rules.numerics import float16_loss_outputs

    found = []
    by_loss = {(id(model), node["id"]) for model, _, _, node in float16_loss_outputs(facts)}
    for model, graph in graphs(facts):
        for node, output in output_nodes(graph):
            dtype = output.get("dtype")
            if not low_precision(dtype):
                continue
            if (id(model), node["id"]) in by_loss and not saturating_activation(node):
                continue
            activation = saturating_activation(node)
            layer_name = node.get("id")
            if activation:
                found.append(ctx.diagnostic(
                    "MP401", node.get("created_at"), f"output `{layer_name}` of model `{model['name']}` is a "
                    f"{activation} computed in {dtype} (policy \"{node.get('policy')}\"): logits beyond 65504 "
                    f"give NaN and probabilities below 6e-8 flush to 0; set dtype=\"float32\" on this layer",
                    layer=layer_name, fix=float32_output_fix(ctx, node)))
            else:
                found.append(ctx.diagnostic(
                    "MP402", node.get("created_at"), f"output `{layer_name}` of model `{model['name']}` is {dtype}: "
                    f"the loss and metrics are then computed in {dtype}; end the model with "
                    f"Activation(\"linear\", dtype=\"float32\") or give this layer dtype=\"float32\"",
                    layer=layer_name, fix=float32_output_fix(ctx, node)))
    return found
