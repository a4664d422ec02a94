"""MP2xx: SavedModel and TF Hub signatures.

Static forms only (source text, no TensorFlow import): MP201 (a SavedModel-backed layer computing in float16) and
MP207 (a float32 cast that the next layer's autocast undoes). MP202 and MP203 need the SavedModel on disk or a
traced model, so they are documented here and raised by the trace / artifact passes.
"""

from __future__ import annotations

import ast
import re
from typing import Iterable, Iterator

from mpdoctor.diagnostics import Confidence, Diagnostic, Fix
from mpdoctor.registry import FLOAT16_TEXT, define_rule, static_check, trace_check
from mpdoctor.static.context import SAVEDMODEL_LAYERS, LayerCall, StaticContext
from mpdoctor.static.policies import compute_dtype, dtype_keyword, is_float16_compute, policy_from_expr
from mpdoctor.trace.context import TraceContext
from mpdoctor.trace.facts import exception_verdict, first_message_line, graphs, layer_record, low_precision

define_rule(
    "MP201", "savedmodel-input-dtype", "error", "STA", True,
    summary="A SavedModel-backed layer (hub.KerasLayer, TFSMLayer) is fed float16 but its SavedModel only takes "
            "float32.",
    what="""
        A layer that calls a SavedModel (`hub.KerasLayer`, `keras.layers.TFSMLayer`, a `tf.saved_model.load`
        object called inside a layer) computes in float16 or bfloat16 because a mixed policy is in force (or its
        own `dtype=` says so). Like every Keras layer it first autocasts its input to its compute dtype, then
        calls the SavedModel with that float16 tensor. A SavedModel exported in float32, which is most TF Hub
        models, has no concrete function or signature accepting float16.

        The static pass reports such a layer under a float16/bfloat16 policy that has no `dtype="float32"`. It
        cannot read the SavedModel, so it reports with medium confidence; the trace and artifact passes confirm
        it by reading the signatures when the handle is a readable local path. Layers whose `dtype=` is not a
        float (`dtype=tf.string` text encoders) and handles that look like text models (string or token-id
        inputs, which autocast never touches) are not reported. A SavedModel layer created inside a custom
        layer's `__init__` takes the global policy, whatever `dtype=` the outer layer was given.
        """,
    why="""
        With tf_keras, `hub.KerasLayer` fails when the model is built ("Could not find matching concrete function
        to call loaded from the SavedModel", or on recent TF "Binding inputs to tf.function failed ... Can not cast
        TensorSpec(dtype=tf.float16) to TensorSpec(dtype=tf.float32)"). With Keras 3, `TFSMLayer` builds fine and
        fails later, at `predict`/`fit` ("Expects arg[0] to be float but half is provided").

        The popular workaround of casting to float32 just before the layer (`Lambda(lambda x: tf.cast(x,
        tf.float32))`) does not help: the SavedModel layer autocasts that float32 tensor straight back to float16
        (see MP207). The layer itself has to compute in float32; the rest of the model keeps its mixed policy.
        """,
    bad="""
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        model = tf.keras.Sequential([
            tf.keras.layers.InputLayer(input_shape=(224, 224, 3)),
            tf.keras.layers.Lambda(lambda x: tf.cast(x, tf.float32)),   # does not help (MP207)
            hub.KerasLayer("https://tfhub.dev/google/imagenet/resnet_v1_50/feature_vector/5"),
            tf.keras.layers.Dense(2, dtype="float32"),
        ])
        """,
    good="""
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        model = tf.keras.Sequential([
            tf.keras.layers.InputLayer(input_shape=(224, 224, 3)),
            hub.KerasLayer("https://tfhub.dev/google/imagenet/resnet_v1_50/feature_vector/5", dtype="float32"),
            tf.keras.layers.Dense(2, dtype="float32"),
        ])
        # Keras 3: keras.layers.TFSMLayer(path, call_endpoint="serving_default", dtype="float32")
        """,
    fix="""
        Adds `dtype="float32"` to the SavedModel layer's constructor (or replaces its float16 `dtype=`). The layer
        then casts its input to float32 and calls the SavedModel's float32 function; the layers after it still
        compute in float16. A SavedModel that really was exported in float16 would need the opposite: check its
        signature with `saved_model_cli show --dir PATH --all`.
        """,
)

define_rule(
    "MP202", "savedmodel-unreadable", "warning", "TA", False,
    summary="A SavedModel / TF Hub handle cannot be resolved, so its signature checks were skipped.",
    what="""
        The handle of a `hub.KerasLayer`, `keras.layers.TFSMLayer` or `tf.saved_model.load` cannot be read: a URL
        while offline (and not in `TFHUB_CACHE_DIR`), a local path that does not exist, or a directory whose
        `saved_model.pb` is missing or corrupt. The message says which, and that the input-dtype check (MP201)
        for that layer was skipped. Trace and artifact passes only: the static pass never touches the disk or the
        network.
        """,
    why="""
        Without the SavedModel the dtype its functions accept is unknown, so a float16-vs-float32 mismatch
        (MP201) can neither be confirmed nor ruled out. The same handle will also fail when the model itself is
        built on this machine.
        """,
    bad="""
        layer = hub.KerasLayer("/models/resnet50_feature_vector")   # directory does not exist here
        """,
    good="""
        # Download once, then point at the local copy (or set TFHUB_CACHE_DIR to a populated cache):
        layer = hub.KerasLayer("/data/tfhub_cache/resnet50_feature_vector")
        """,
    fix="No autofix: make the SavedModel available (path, cache or network) and run mpdoctor again.",
)

define_rule(
    "MP203", "exported-signature-float16", "warning", "T", True,
    summary="A model exported under a float16 policy has float16 inputs or outputs in its serving signature.",
    what="""
        A model saved or exported (`model.save`, `model.export`, `tf.saved_model.save`) while a float16/bfloat16
        policy is in force ends up with float16 tensors in its serving signature: its output layer computes in
        float16, or an input spec was traced from float16 tensors. Found by the trace pass, which exports the
        model to a temporary directory and reads the signatures back.
        """,
    why="""
        Consumers of the SavedModel (TF Serving, TFLite converters, `hub.KerasLayer`, `TFSMLayer`, other teams)
        feed and expect float32. A float16 input signature rejects their float32 tensors; float16 outputs lose
        precision and overflow to inf above 65504.
        """,
    bad="""
        keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = keras.Input((128,))
        outputs = keras.layers.Dense(10)(keras.layers.Dense(64, activation="relu")(inputs))   # float16 output
        keras.Model(inputs, outputs).export("/tmp/serving")
        """,
    good="""
        keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = keras.Input((128,))
        x = keras.layers.Dense(10)(keras.layers.Dense(64, activation="relu")(inputs))
        outputs = keras.layers.Activation("linear", dtype="float32")(x)   # float32 output
        keras.Model(inputs, outputs).export("/tmp/serving")
        """,
    fix="""
        Adds a float32 output layer (`Activation("linear", dtype="float32")`) before export, or an explicit
        float32 `input_signature` / `tf.TensorSpec(..., tf.float32)` for the exported function.
        """,
)

define_rule(
    "MP207", "cast-undone-by-autocast", "warning", "ST", True,
    summary="A cast to float32 right before a float16 layer is undone by that layer's autocast.",
    what="""
        A tensor is cast to float32 (`Lambda(lambda x: tf.cast(x, tf.float32))`, `tf.cast(x, "float32")`,
        `keras.ops.cast(x, "float32")`) and then passed straight to a layer whose compute dtype is float16 or
        bfloat16. Keras layers cast their floating inputs to their compute dtype on entry, so the layer sees
        float16 again and the cast does nothing. The diagnostic sits on the cast and names the layer that undoes
        it.

        tf_keras (Keras 2) autocasts only the FIRST argument of a layer call (including every tensor nested in
        it, e.g. `Concatenate()([a, b])`): a float32 tensor passed as a later argument is not undone (it meets
        float16 math instead and fails, which is a different problem). Keras 3 autocasts every floating argument.
        Layers that do not autocast (`Embedding`, lookup and text layers; in Keras 3 also `LayerNormalization`
        and `GroupNormalization`, which normalise in float32) are not reported, nor are casts of integer inputs,
        casts feeding plain TF ops or model outputs, and casts inside a custom layer's own `call`. In Keras 3
        functional code a raw `tf.cast` of a symbolic tensor raises instead (use `keras.ops.cast`), so only
        `keras.ops.cast` and casting `Lambda` layers are reported there.
        """,
    why="""
        The cast is usually a workaround for a layer that must see float32 (a TF Hub / SavedModel layer, a
        numerically sensitive head). It silently fails at that: the SavedModel still receives float16 (see
        MP201) or the head still computes in float16. The way to make a layer compute in float32 is its own
        `dtype="float32"`, which makes it cast its inputs to float32 itself.
        """,
    bad="""
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        model = tf.keras.Sequential([
            tf.keras.layers.InputLayer(input_shape=(224, 224, 3)),
            tf.keras.layers.Lambda(lambda x: tf.cast(x, tf.float32)),   # undone by the next layer
            hub.KerasLayer(handle),
        ])
        """,
    good="""
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        model = tf.keras.Sequential([
            tf.keras.layers.InputLayer(input_shape=(224, 224, 3)),
            hub.KerasLayer(handle, dtype="float32"),   # computes in float32, casts its own input
        ])
        """,
    fix="""
        Adds `dtype="float32"` to the constructor of the consuming layer (only when that constructor is a literal
        call with no `dtype=` or `**kwargs` of its own). The cast itself is left in place; it is now merely
        redundant and can be deleted by hand.
        """,
)


# --------------------------------------------------------------------------------------------------- MP201

_SEQUENTIAL = ("keras.Sequential", "keras.models.Sequential")
# Handles of TF Hub models whose inputs are strings or token ids: autocast never touches those.
_TEXT_HANDLE = re.compile(
    r"nnlm|universal[-_]sentence[-_]encoder|bert|electra|albert|talking-heads|wiki[-_]words|gnews[-_]swivel|"
    r"elmo|labse|muril|preprocess|tokeni[sz]|/text[-_/]|text[-_]embedding")


@static_check("MP201", requires=(FLOAT16_TEXT, r"KerasLayer|TFSMLayer"))
def check_savedmodel_input_dtype(ctx: StaticContext) -> Iterable[Diagnostic]:
    for layer in ctx.layer_calls:
        if layer.qualname not in SAVEDMODEL_LAYERS:
            continue
        policy = ctx.float16_policy(_layer_policies(ctx, layer))
        if policy is None or _text_input_layer(ctx, layer.node):
            continue
        compute = compute_dtype(policy)
        explicit = dtype_keyword(layer.node) is not None
        where = f'its own dtype policy "{policy}"' if explicit else f'global policy "{policy}"'
        if layer.qualname == "hub.KerasLayer" and ctx.is_keras3:
            outcome = "the model will still fail to build once it runs on tf_keras (MP104)"
        elif layer.qualname == "hub.KerasLayer":
            outcome = "the model fails when it is built"
        else:
            outcome = "the model builds but predict/fit fail"
        label = _layer_label(layer)
        message = (f"{label} computes in {compute} ({where}) and casts its input to {compute} before calling its "
                   f"SavedModel, but a SavedModel exported in float32 (most TF Hub models) has no {compute} "
                   f'concrete function, so {outcome}: pass dtype="float32" to {label}')
        fix = None
        if not _has_star_kwargs(layer.node):
            fix = ctx.add_keyword_fix(layer.node, "dtype", '"float32"',
                                      f'compute {layer.kind} in float32 (dtype="float32")')
        yield ctx.diagnostic(
            "MP201", layer.node, message, confidence=Confidence.MEDIUM, fix=fix,
            notes=(f"A Lambda or tf.cast to float32 before {layer.kind} does not help: the layer casts its input "
                   f"back to {compute} (MP207).",
                   "Static check: the SavedModel's signatures were not read; a SavedModel exported in "
                   f"{compute} would accept these inputs."))


def _layer_policies(ctx: StaticContext, layer: LayerCall) -> frozenset[str | None]:
    """Like `ctx.layer_policies`, except for a layer built inside a local layer class's methods (`self.encoder =
    hub.KerasLayer(...)` in `__init__`): such a sublayer takes the GLOBAL policy in force where the outer layer is
    constructed, not the outer layer's own `dtype=` (checked on tf_keras 2.21 and Keras 3.15)."""
    if dtype_keyword(layer.node) is None:
        function = ctx.enclosing_function(layer.node)
        cls = ctx.enclosing_class(layer.node)
        if (function is not None and cls is not None and ctx.parents.get(function) is cls
                and cls.name in ctx.custom_layer_classes and ctx.enclosing_function(cls) is None
                and not any(e.scope is function and e.node.lineno < layer.node.lineno for e in ctx.policy_events)):
            names = {cls.name} | ctx._subclasses(cls.name)
            sites = [lc for lc in ctx.layer_calls if lc.custom and lc.qualname in names]
            if sites:
                return frozenset().union(*(ctx.policies_at(site.node) for site in sites))
    return ctx.layer_policies(layer)


def _layer_label(layer: LayerCall) -> str:
    return "hub.KerasLayer" if layer.qualname == "hub.KerasLayer" else layer.kind


def _text_input_layer(ctx: StaticContext, call: ast.Call) -> bool:
    """A SavedModel layer that takes strings or token ids (text encoders): its inputs are never autocast."""
    for kw in call.keywords:
        if kw.arg == "input_shape" and isinstance(kw.value, (ast.List, ast.Tuple)) and not kw.value.elts:
            return True  # `input_shape=[]`: one string per example
    handle = call.args[0] if call.args else next((k.value for k in call.keywords
                                                   if k.arg in ("handle", "filepath")), None)
    text = _string_value(ctx, handle, call)
    return bool(text and _TEXT_HANDLE.search(text.lower()))


def _string_value(ctx: StaticContext, expr: ast.AST | None, at: ast.AST, depth: int = 0) -> str | None:
    """A string literal, f-string head, `a + b` of those, or a name bound to one (best effort)."""
    if expr is None or depth > 5:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.JoinedStr):
        return "".join(v.value for v in expr.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        parts = [_string_value(ctx, side, at, depth + 1) for side in (expr.left, expr.right)]
        return "".join(p for p in parts if p) or None
    if isinstance(expr, ast.Name):
        value = ctx.last_assignment(expr.id, at) or ctx.module_constants.get(expr.id)
        return _string_value(ctx, value, at, depth + 1)
    return None


def _has_star_kwargs(call: ast.Call) -> bool:
    return any(kw.arg is None for kw in call.keywords)


# --------------------------------------------------------------------------------------------------- MP207

_TF_CASTS = ("tf.cast", "tf.dtypes.cast")
_CAST_FUNCTIONS = (*_TF_CASTS, "keras.ops.cast", "keras.backend.cast")
_INPUT_CONSTRUCTORS = ("keras.Input", "keras.layers.Input", "keras.layers.InputLayer")
_INT_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "string"}
# Layers that do not autocast their inputs (or whose inputs are not floats): a float32 cast before them is not
# undone, or not a float16 question at all.
_NO_AUTOCAST = {"Embedding", "InputLayer", "Input", "StringLookup", "IntegerLookup", "TextVectorization",
                "Hashing", "HashedCrossing", "CategoryEncoding"}
_NO_AUTOCAST_KERAS3 = {"LayerNormalization", "GroupNormalization", "RandomFlip", "RandomCrop", "Pipeline"}


@static_check("MP207", requires=(FLOAT16_TEXT, r"cast"))
def check_cast_undone_by_autocast(ctx: StaticContext) -> Iterable[Diagnostic]:
    found: dict[ast.AST, list[tuple[LayerCall, str]]] = {}  # cast node -> consuming layers (with policy)
    unknown_input: set[ast.AST] = set()  # casts whose input may be an integer tensor (a real conversion)
    for cast, consumer, input_known in [*_sequential_pairs(ctx), *_functional_pairs(ctx)]:
        policy = _undoing_policy(ctx, consumer)
        if policy is None:
            continue
        if not input_known:
            unknown_input.add(cast)
        entries = found.setdefault(cast, [])
        if all(c.node is not consumer.node for c, _ in entries):
            entries.append((consumer, policy))
    for cast, consumers in sorted(found.items(), key=lambda item: (item[0].lineno, item[0].col_offset)):
        yield _cast_diagnostic(ctx, cast, consumers, cast not in unknown_input)


def _cast_diagnostic(ctx: StaticContext, cast: ast.AST, consumers: list[tuple[LayerCall, str]],
                     input_known: bool) -> Diagnostic:
    first, policy = consumers[0]
    compute = compute_dtype(policy)
    name = _layer_label(first)
    others = f" (and {len(consumers) - 1} more layer{'s' if len(consumers) > 2 else ''})" if len(consumers) > 1 else ""
    message = (f'this cast to float32 is undone: {name} (line {first.node.lineno}, policy "{policy}") autocasts '
               f'its input back to {compute}{others}; put dtype="float32" on {name} instead to compute it in '
               f"float32")
    edits = []
    for consumer, _ in consumers:
        if not _can_add_dtype(ctx, consumer):
            edits = []
            break
        edits += ctx.add_keyword_fix(consumer.node, "dtype", '"float32"', "").edits
    fix = None
    if edits:
        names = ", ".join(dict.fromkeys(c.kind for c, _ in consumers))
        fix = Fix(f'compute {names} in float32 (dtype="float32"); the cast before it becomes redundant',
                  tuple(edits))
    policies = [_layer_policies(ctx, c) for c, _ in consumers]
    certain = input_known and all(all(is_float16_compute(p) for p in ps) for ps in policies)
    return ctx.diagnostic("MP207", cast, message, confidence=Confidence.HIGH if certain else Confidence.MEDIUM,
                          fix=fix)


def _undoing_policy(ctx: StaticContext, consumer: LayerCall) -> str | None:
    """The float16/bfloat16 policy under which `consumer` autocasts a float32 input back down, else None."""
    if consumer.kind in _NO_AUTOCAST or (ctx.is_keras3 and consumer.kind in _NO_AUTOCAST_KERAS3):
        return None
    if consumer.custom:
        cls = ctx.custom_layer_classes.get(consumer.qualname)
        if cls is None or ctx.is_custom_model(cls) or "autocast" in ctx.segment(cls):
            return None
    return ctx.float16_policy(_layer_policies(ctx, consumer))


def _can_add_dtype(ctx: StaticContext, consumer: LayerCall) -> bool:
    call = consumer.node
    if dtype_keyword(call) is not None or _has_star_kwargs(call):
        return False
    if consumer.custom:
        return _init_accepts_dtype(ctx, ctx.custom_layer_classes[consumer.qualname])
    return True


def _init_accepts_dtype(ctx: StaticContext, cls: ast.ClassDef, depth: int = 0) -> bool:
    if depth > 10:
        return False
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
            args = stmt.args
            names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            return args.kwarg is not None or "dtype" in names
    for base in cls.bases:  # no __init__ here: inherited from a local base, or from keras.layers.Layer
        if isinstance(base, ast.Name) and base.id in ctx.classes and base.id != cls.name:
            return _init_accepts_dtype(ctx, ctx.classes[base.id], depth + 1)
    return True


# ---- where casts meet layers

def _sequential_pairs(ctx: StaticContext) -> Iterator[tuple[ast.AST, LayerCall, bool]]:
    """(cast Lambda constructor, next layer) in `Sequential([...])` lists and consecutive `model.add(...)`."""
    for call in ctx.calls:
        if ctx.call_name(call) not in _SEQUENTIAL:
            continue
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


def _adjacent_pairs(ctx: StaticContext, elements: list[ast.AST]) -> Iterator[tuple[ast.AST, LayerCall, bool]]:
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
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add" and len(call.args) == 1
            and not call.keywords):
        return None
    return ast.dump(call.func.value), call.args[0]


def _statement_lists(ctx: StaticContext) -> Iterator[list[ast.stmt]]:
    for node in [ctx.tree, *ctx.nodes]:
        for field in ("body", "orelse", "finalbody"):
            value = getattr(node, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield value


def _functional_pairs(ctx: StaticContext) -> Iterator[tuple[ast.AST, LayerCall, bool]]:
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
    """The call arguments the layer autocasts: the first one in tf_keras, every one in Keras 3."""
    if ctx.is_keras3:
        return ([a.value if isinstance(a, ast.Starred) else a for a in call.args]
                + [k.value for k in call.keywords if k.arg and "mask" not in k.arg and k.arg != "training"])
    if call.args:
        return [] if isinstance(call.args[0], ast.Starred) else [call.args[0]]
    return [k.value for k in call.keywords if k.arg == "inputs"]


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


# ---- what counts as a cast

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


def _is_cast_lambda(ctx: StaticContext, layer: LayerCall) -> bool:
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
            body = [s for s in defs[0].body
                    if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]  # docstring
            return (len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None
                    and _returns_cast_of_first_param(ctx, defs[0].args, body[0].value))
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


# ---- integer inputs: a cast of those to float32 is a real conversion, not undone precision

def _non_float_input_layer(ctx: StaticContext, element: ast.AST) -> bool:
    """A Sequential element that is an `InputLayer`/`Input` with an integer or string dtype."""
    if isinstance(element, ast.Name):
        element = ctx.last_assignment(element.id, element) or element
    if isinstance(element, ast.Call) and ctx.call_name(element) in _INPUT_CONSTRUCTORS:
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


# ---------------------------------------------------------------- trace forms


def _dtype_fix(ctx: TraceContext, location: dict | None) -> Fix | None:
    call = ctx.call_at((location or {}).get("line"), "KerasLayer", "TFSMLayer")
    if call is None or ctx.static is None or any(k.arg is None for k in call.keywords):
        return None
    return ctx.static.add_keyword_fix(call, "dtype", '"float32"', 'pass dtype="float32" so the layer feeds its '
                                      "SavedModel float32")


@trace_check("MP201")
def trace_savedmodel_input_dtype(facts: dict, ctx: TraceContext) -> Iterable[Diagnostic]:
    """Compare what each SavedModel-backed layer feeds its SavedModel (its compute dtype, after autocast) with the
    input dtypes the SavedModel's concrete functions / signatures accept."""
    found = []
    for load in facts.get("savedmodel_loads", []):
        record = layer_record(facts, load.get("layer_uid"))
        info = load.get("savedmodel") or {}
        accepted = info.get("accepted_input_dtypes") or []
        if record is None or info.get("error") or not accepted:
            continue
        received = record.get("compute_dtype")
        if not record.get("autocast", True) or not low_precision(received) or received in accepted:
            continue
        exception = facts.get("exception") or {}
        observed = (f"; the run failed with: {first_message_line(exception.get('message', ''))}"
                    if exception.get("layer_uid") == load.get("layer_uid") else
                    "; the call fails (\"Could not find matching concrete function\")")
        found.append(ctx.diagnostic(
            "MP201", load["location"],
            f"{load['api']} `{record.get('name')}` computes in {received} (policy \"{record.get('policy')}\") and "
            f"casts its input to {received}, but the SavedModel at {load['handle']} accepts only "
            f"{', '.join(accepted)}{observed}; pass dtype=\"float32\" to this layer",
            layer=record.get("name"), fix=_dtype_fix(ctx, load["location"])))
    verdict = exception_verdict(facts)
    if not found and verdict and verdict.get("code") == "MP201":
        load = _failing_load(facts)
        where = load["location"] if load else facts["exception"].get("location")
        accepted = ", ".join(verdict.get("accepted") or []) or "float32"
        found.append(ctx.diagnostic(
            "MP201", where, f"the SavedModel-backed layer received {verdict.get('received', 'float16')} but its "
            f"SavedModel accepts {accepted}: the model failed when it ran; pass dtype=\"float32\" to this layer",
            fix=_dtype_fix(ctx, where)))
    return found


def _failing_load(facts: dict) -> dict | None:
    uid = (facts.get("exception") or {}).get("layer_uid")
    loads = [load for load in facts.get("savedmodel_loads", []) if load.get("layer_uid")]
    for load in loads:
        if load["layer_uid"] == uid:
            return load
    return loads[-1] if loads else None


@trace_check("MP202")
def trace_savedmodel_unreadable(facts: dict, ctx: TraceContext) -> Iterable[Diagnostic]:
    found = []
    for load in facts.get("savedmodel_loads", []):
        error = (load.get("savedmodel") or {}).get("error")
        if error:
            found.append(ctx.diagnostic(
                "MP202", load["location"], f"cannot read the SavedModel behind {load['api']} "
                f"({load['handle']}): {error.get('message', error.get('kind'))}; its signature checks were skipped"))
    return found


@trace_check("MP203")
def trace_exported_signature_float16(facts: dict, ctx: TraceContext) -> Iterable[Diagnostic]:
    found = []
    for export in facts.get("exports", []):
        info = export.get("savedmodel") or {}
        low = sorted({f"{kind} `{spec.get('name')}` is {spec.get('dtype')}"
                      for signature in info.get("signatures", [])
                      for kind in ("inputs", "outputs") for spec in signature.get(kind, [])
                      if low_precision(spec.get("dtype"))})
        if low:
            found.append(ctx.diagnostic(
                "MP203", export["location"], f"{export['api']} wrote a serving signature with low-precision "
                f"tensors ({'; '.join(low[:4])}): consumers that feed float32 or expect float32 break; make the "
                f"output layer float32 and give the input an explicit float32 spec"))
    return found


@trace_check("MP207")
def trace_cast_undone_by_autocast(facts: dict, ctx: TraceContext) -> Iterable[Diagnostic]:
    """A Lambda that casts to float32 (per its source line) whose output feeds, as an autocast argument, a layer
    computing in float16: the graph shows the consumer's input after autocast is float16 again."""
    found = []
    for _, graph in graphs(facts):
        nodes = {n["id"]: n for n in graph.get("nodes", [])}
        for edge in graph.get("edges", []):
            source, target = nodes.get(edge.get("source")), nodes.get(edge.get("target"))
            if not source or not target or source.get("class") != "Lambda":
                continue
            line = (source.get("created_at") or {}).get("line")
            text = ctx.static.lines[line - 1] if ctx.static and line and line <= len(ctx.static.lines) else ""
            if "cast" not in text or "float32" not in text:
                continue
            index = edge.get("arg_index") or 0
            predicted = target.get("predicted_input_dtypes") or []
            after = predicted[index] if index < len(predicted) else None
            if target.get("autocast") and low_precision(after):
                found.append(ctx.diagnostic(
                    "MP207", source.get("created_at"), f"the float32 cast in `{source['id']}` is undone: "
                    f"`{target['id']}` ({target.get('class')}, policy \"{target.get('policy')}\") autocasts its "
                    f"input back to {after}; put dtype=\"float32\" on `{target['id']}` instead",
                    layer=source["id"]))
    return found
