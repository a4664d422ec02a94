"""MP1xx: dtype policy and environment.

Static forms of MP101-MP104. Ground truth measured on TF 2.21 / keras 3.15 / tf_keras 2.21 / tensorflow_hub 0.16:
- A layer (or a `keras.applications` model) keeps the global policy in force when it was constructed; setting
  `mixed_float16` afterwards changes only layers created later (Keras 2 and 3).
- `set_floatx("float16")` in a fresh process makes new layers compute AND store variables in float16, like
  `set_global_policy("float16")`.
- `tf.keras.mixed_precision.experimental` is gone (ImportError / AttributeError, removed in TF 2.9);
  `tf.train.experimental.enable_mixed_precision_graph_rewrite` and `tf.mixed_precision` are gone from TF2's
  namespace; `tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite` still exists but raises ValueError
  for Keras 3 and tf_keras (non-legacy) optimizers; Keras 3 `LossScaleOptimizer` has `scale_loss` and unscales in
  `apply`/`apply_gradients`, and no `get_scaled_loss` / `get_unscaled_gradients`.
- `hub.KerasLayer` is a tf_keras layer: inside a Keras 3 `Sequential` (list or `.add`) it fails with "Only
  instances of `keras.Layer` can be added"; called on a Keras 3 `keras.Input` it fails with "A KerasTensor cannot
  be used as input to a TensorFlow function". Called eagerly on tensors, or wrapped in a Keras 3 custom layer or
  `Lambda`, it runs.
"""

from __future__ import annotations

import ast
from typing import Iterable, Iterator

from mpdoctor.diagnostics import Confidence, Diagnostic, Fix
from mpdoctor.registry import define_rule, static_check, trace_check
from mpdoctor.static import environment
from mpdoctor.static.context import FUNCTION_NODES, LayerCall, PolicyEvent, StaticContext
from mpdoctor.static.insert import after_imports, module_alias
from mpdoctor.static.policies import POLICY_CONSTRUCTORS, POLICY_SETTERS, dtype_keyword, is_float16_compute
from mpdoctor.trace.context import TraceContext
from mpdoctor.trace.facts import exception_verdict, final_policy, first_message_line, keras_major

define_rule(
    "MP101", "policy-set-after-layers", "warning", "ST", False,
    summary="A float16 global policy is set after layers or models were already created; those keep the old one.",
    what="""
        A layer reads the global dtype policy once, when it is constructed, and keeps it. MP101 reports a global
        policy call (`set_global_policy`, `set_dtype_policy`, `set_floatx`) that switches to a float16/bfloat16
        compute policy AFTER layers or models were already built earlier in the same run: lexically earlier in
        the same scope, or inside a local function called earlier in that scope (`model = build_model()` before
        the policy call). `keras.applications` models and local Layer/Model subclasses count. The message names
        the first such layer and its line.

        Not reported: layers built inside a function that is only called after the policy call; layers with an
        explicit `dtype=`; `Input`/`InputLayer` and preprocessing layers (Rescaling, Random*, Normalization...);
        resetting to `float32` at the end of a script (a common cleanup); switching between two low-precision
        policies (`mixed_bfloat16` -> `mixed_float16`); a builder called both before and after
        the policy call, or a `clear_session()` between the two (comparing a float32 and a mixed model on
        purpose); code in the other branch of an `if`. The static pass does not follow methods, imported
        builders or calls from other modules; the trace pass sees the real construction order.
        """,
    why="""
        Layers built before the call keep computing (and storing variables) in the old policy, usually
        float32: the model silently runs with no mixed precision at all, or only partly (a float32 backbone
        under a float16 head), with none of the expected speed or memory savings.
        """,
    bad="""
        base = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(224, 224, 3))
        keras.mixed_precision.set_global_policy("mixed_float16")   # too late: ResNet50 stays float32
        x = keras.layers.GlobalAveragePooling2D()(base.output)
        outputs = keras.layers.Dense(10, activation="softmax", dtype="float32")(x)
        """,
    good="""
        keras.mixed_precision.set_global_policy("mixed_float16")   # first, before building anything
        base = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(224, 224, 3))
        x = keras.layers.GlobalAveragePooling2D()(base.output)
        outputs = keras.layers.Dense(10, activation="softmax", dtype="float32")(x)
        """,
    fix="No autofix: move the policy call above the code that builds the model (usually right after the imports).",
)

define_rule(
    "MP102", "pure-float16-policy", "warning", "ST", True,
    summary="Global policy `float16`/`bfloat16` (not `mixed_*`) in a script that trains: weights become low precision.",
    what="""
        The global policy is set to `float16` or `bfloat16` (`set_global_policy("float16")`,
        `set_dtype_policy`, `Policy("float16")`, `set_floatx("float16")`) in a file that trains a model
        (`.fit(`, `.fit_generator(`, `.train_on_batch(`, or `GradientTape` with `apply_gradients` /
        `optimizer.apply`). Files that only run inference are not reported, nor a policy set only after the
        training at module level. A `set_floatx` call is ignored when the file also sets a policy explicitly
        (an explicit global policy overrides floatx).
        """,
    why="""
        Unlike `mixed_float16`, a pure `float16` policy also stores the variables in float16: updates smaller
        than about 1/1000 of a weight round away, optimizer slots and epsilons underflow, and there is no loss
        scaling. Measured: `float16` with Adam on Keras 3 stalls or goes NaN in the first epoch while the same
        script trains under `mixed_float16`.
        """,
    bad="""
        keras.mixed_precision.set_global_policy("float16")
        model = build_model()
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        model.fit(x_train, y_train, epochs=5)
        """,
    good="""
        keras.mixed_precision.set_global_policy("mixed_float16")   # float16 math, float32 variables
        model = build_model()
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        model.fit(x_train, y_train, epochs=5)
        """,
    fix="""
        Replaces the policy string literal (`"float16"` -> `"mixed_float16"`, `"bfloat16"` -> `"mixed_bfloat16"`),
        in the call, in an inline `Policy(...)`, or in a module constant used only there. A
        `<keras>.backend.set_floatx("float16")` / `<keras>.config.set_floatx(...)` call is replaced by
        `<keras>.mixed_precision.set_global_policy("mixed_float16")` (marked unsafe: code that reads `floatx()`
        changes too). No fix when the policy is not a literal the file spells.
        """,
)

define_rule(
    "MP103", "legacy-mixed-precision-api", "error", "S", True,
    summary="A removed or TF1-only mixed precision API (`mixed_precision.experimental`, the graph rewrite, "
            "`get_scaled_loss` on Keras 3).",
    what="""
        Uses of mixed precision APIs that no longer exist or no longer work with Keras:
        - `tf.keras.mixed_precision.experimental.*` (`set_policy`, `Policy`, `LossScaleOptimizer`,
          `global_policy`, `get_layer_policy`), including `from tensorflow.keras.mixed_precision import
          experimental as mixed_precision`: removed in TF 2.9 (absent from tf_keras 2.21 and Keras 3);
        - `tf.train.experimental.enable_mixed_precision_graph_rewrite` and the `LossScale` classes,
          `tf.mixed_precision.experimental.*`: removed from TF2's namespace;
        - `tf.compat.v1.mixed_precision.*` / `tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite`:
          still importable, but the rewrite raises ValueError for Keras optimizers (Keras 3, tf_keras) and
          refuses a mixed Keras policy; reported with low confidence in TF1 graph-mode code, where it still runs;
        - under Keras 3, `optimizer.get_scaled_loss(...)` / `optimizer.get_unscaled_gradients(...)` (the tf_keras
          `LossScaleOptimizer` API; valid, and not reported, with tf_keras).
        Compatibility shims are not reported: code in a `try` whose handler catches ImportError / AttributeError,
        or in an `if` on a version or `hasattr` test.
        """,
    why="""
        The script fails at import or at the first call (ImportError / AttributeError / ValueError), or, for the
        TF1 rewrite, silently does nothing in eager TF2 code.
        """,
    bad="""
        from tensorflow.keras.mixed_precision import experimental as mixed_precision
        mixed_precision.set_policy("mixed_float16")
        opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(), "dynamic")
        """,
    good="""
        from tensorflow.keras import mixed_precision
        mixed_precision.set_global_policy("mixed_float16")
        opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())   # dynamic loss scaling by default
        """,
    fix="""
        Mechanical rewrites spelled the way the file spells them: the `experimental` import becomes
        `from tensorflow.keras import mixed_precision` (keeping the alias), `experimental.set_policy` ->
        `set_global_policy`, `experimental.Policy` -> `Policy`, `experimental.LossScaleOptimizer(opt, "dynamic")` ->
        `LossScaleOptimizer(opt)`, `get_layer_policy(layer)` -> `layer.dtype_policy`; on Keras 3
        `opt.get_scaled_loss(loss)` -> `opt.scale_loss(loss)` and `opt.get_unscaled_gradients(grads)` -> `grads`
        (`apply_gradients` unscales). The graph rewrite of a Keras optimizer becomes
        `keras.mixed_precision.LossScaleOptimizer(opt)` plus `set_global_policy("mixed_float16")` after the imports
        when the file sets no policy (unsafe: every layer then computes in float16). No fix for a fixed numeric loss
        scale, the LossScale classes or the rewrite of a TF1 optimizer in graph code (it still works there).
        """,
)

define_rule(
    "MP104", "hub-layer-on-keras3", "error", "ST", False,
    summary="`hub.KerasLayer` (a tf_keras layer) added to a Keras 3 model.",
    what="""
        `hub.KerasLayer` is built on tf_keras (Keras 2). MP104 reports one that is added to a Keras 3 model:
        listed in a `Sequential([...])`, passed to `model.add(...)`, or called on a Keras 3 symbolic tensor
        (`keras.Input`, another layer's output, `model.output`) in the functional API, when the file's Keras is 3
        (`import keras`, or `tf.keras` on TF >= 2.16 without `TF_USE_LEGACY_KERAS=1`). Confidence is lowered when
        the Keras version is a guess. Not reported: `hub.load(...)`, a hub layer called eagerly on tensors or
        wrapped in a custom layer / `Lambda` (those run), and files on tf_keras or with `TF_USE_LEGACY_KERAS=1`.
        """,
    why="""
        Keras 3 only accepts its own layers: `Sequential` raises "Only instances of `keras.Layer` can be added to a
        Sequential model", and the functional API raises "A KerasTensor cannot be used as input to a TensorFlow
        function".
        """,
    bad="""
        import keras
        import tensorflow_hub as hub
        model = keras.Sequential([
            keras.Input((224, 224, 3)),
            hub.KerasLayer("https://tfhub.dev/google/imagenet/resnet_v1_50/feature_vector/5"),
            keras.layers.Dense(2),
        ])
        """,
    good="""
        import os
        os.environ["TF_USE_LEGACY_KERAS"] = "1"     # before importing tensorflow; needs `pip install tf_keras`
        import tensorflow as tf
        import tensorflow_hub as hub
        model = tf.keras.Sequential([
            tf.keras.layers.InputLayer(input_shape=(224, 224, 3)),
            hub.KerasLayer("https://tfhub.dev/google/imagenet/resnet_v1_50/feature_vector/5"),
            tf.keras.layers.Dense(2),
        ])
        # or, staying on Keras 3: keras.layers.TFSMLayer(local_savedmodel_dir, call_endpoint="serving_default")
        """,
    fix="""
        No autofix (the choice is a dependency decision): use tf_keras with `TF_USE_LEGACY_KERAS=1` set before
        TensorFlow is imported, or load the SavedModel with `keras.layers.TFSMLayer` (inference only, needs a
        local directory; give it `dtype="float32"` under a float16 policy, see MP201).
        """,
)


# ==================================================================== MP101

# Layers whose policy is harmless or meaningless when created before the policy call.
_NEUTRAL_LAYERS = {
    "Input", "InputLayer", "Rescaling", "Resizing", "CenterCrop", "Normalization", "TextVectorization",
    "StringLookup", "IntegerLookup", "CategoryEncoding", "Hashing", "Discretization", "HashedCrossing",
    "RandomFlip", "RandomRotation", "RandomZoom", "RandomTranslation", "RandomContrast", "RandomCrop",
    "RandomBrightness", "RandomHeight", "RandomWidth", "AutoContrast", "Pipeline",
}
_CLEAR_SESSION = ("keras.backend.clear_session", "keras.utils.clear_session")


@static_check("MP101")
def check_policy_after_layers(ctx: StaticContext) -> Iterable[Diagnostic]:
    for event in ctx.policy_events:
        if not is_float16_compute(event.policy):
            continue  # float32 at the end of a script is a cleanup; unknown values stay quiet
        # constructions that ran under a float32/float64 (or unknown) policy; switching between two low-precision
        # policies is deliberate
        found = [item for item in _built_before(ctx, event)
                 if not any(is_float16_compute(p) for p in ctx.policies_at(item[0]))]
        if not found:
            continue
        (site, layer, via), *others = found
        old = ctx.policies_at(site)
        old_text = "/".join(sorted(p or "an unknown policy" for p in old))
        built = f"{layer.kind} (line {layer.node.lineno})"
        if via is not None:
            built = f"{via.func.id}() (line {via.lineno}) built {built}"  # type: ignore[attr-defined]
        else:
            built = f"{built} was built"
        more = f" (and {len(others)} more construction{'s' if len(others) > 1 else ''})" if others else ""
        message = (f"{_setter_text(ctx, event)} sets {event.policy!r} only after {built}{more}: layers keep the "
                   f"policy in force when they are created, so {'these' if others else 'it'} still compute"
                   f"{'' if others else 's'} in {old_text}; set the policy before building the model")
        yield ctx.diagnostic("MP101", event.node, message,
                             confidence=Confidence.MEDIUM if None in old else Confidence.HIGH)


def _built_before(ctx: StaticContext, event: PolicyEvent) -> list[tuple[ast.Call, LayerCall, ast.Call | None]]:
    """(site, layer, via) for each construction that runs before `event` in its scope, in source order: `site` is
    the layer call itself or the call of a local builder function `via` whose body constructs `layer`."""
    scope = event.scope or ctx.tree
    start = _last_clear_session(ctx, scope, event.node)
    after_calls = {n.func.id for n in ctx.walk_scope(scope) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                   and _pos(n) > _pos(event.node)}
    found = []
    for node in ctx.walk_scope(scope):
        if not isinstance(node, ast.Call) or not (start < _pos(node) < _pos(event.node)):
            continue
        if _exclusive_branches(ctx, node, event.node):
            continue
        layer = _construction(ctx, node)
        if layer is not None:
            found.append((node, layer, None))
            continue
        function = _local_function(ctx, node)
        if function is not None and function.name not in after_calls:  # rebuilt after the call: on purpose
            built = _first_construction_in(ctx, function, frozenset())
            if built is not None:
                found.append((node, built, node))
    return sorted(found, key=lambda item: _pos(item[0]))


def _construction(ctx: StaticContext, call: ast.Call) -> LayerCall | None:
    """A layer/model constructor call that takes the global policy: no explicit dtype, not an input or
    preprocessing layer; `keras.applications` models included."""
    layer = ctx.layer_call(call)
    if layer is None and _is_application(ctx, call):
        layer = LayerCall(call, ctx.call_name(call), custom=False)  # type: ignore[arg-type]
    if layer is None or layer.kind in _NEUTRAL_LAYERS or dtype_keyword(call) is not None:
        return None
    return layer


def _is_application(ctx: StaticContext, call: ast.Call) -> bool:
    """`keras.applications.ResNet50(...)`, `tf.keras.applications.mobilenet_v2.MobileNetV2(...)`."""
    name = ctx.call_name(call) or ""
    return name.startswith("keras.applications.") and name.rsplit(".", 1)[-1][:1].isupper()


def _first_construction_in(ctx: StaticContext, function: ast.AST, visiting: frozenset) -> LayerCall | None:
    if function in visiting or len(visiting) > 6:
        return None
    visiting = visiting | {function}
    for node in sorted((n for n in ctx.walk_scope(function) if isinstance(n, ast.Call)), key=_pos):
        layer = _construction(ctx, node)
        if layer is not None:
            return layer
        inner = _local_function(ctx, node)
        if inner is not None:
            layer = _first_construction_in(ctx, inner, visiting)
            if layer is not None:
                return layer
    return None


def _local_function(ctx: StaticContext, call: ast.Call) -> ast.FunctionDef | None:
    """The module-level (or same-scope) function a plain-name call invokes, if it is defined in this file."""
    if not isinstance(call.func, ast.Name):
        return None
    scope = ctx.enclosing_function(call) or ctx.tree
    for candidates in (getattr(scope, "body", []), ctx.tree.body):
        for stmt in candidates:
            if isinstance(stmt, FUNCTION_NODES) and stmt.name == call.func.id:
                return stmt  # type: ignore[return-value]
    return None


def _last_clear_session(ctx: StaticContext, scope: ast.AST, before: ast.AST) -> tuple[int, int]:
    positions = [_pos(n) for n in ctx.walk_scope(scope) if isinstance(n, ast.Call)
                 and ctx.call_name(n) in _CLEAR_SESSION and _pos(n) < _pos(before)]
    return max(positions, default=(0, 0))


def _exclusive_branches(ctx: StaticContext, a: ast.AST, b: ast.AST) -> bool:
    """True when `a` and `b` sit in different arms of the same `if` (or `match`), so never both run."""
    arms_of_b = dict(_arms(ctx, b))
    for owner, arm in _arms(ctx, a):
        if owner in arms_of_b and arms_of_b[owner] != arm:
            return True
    return False


def _arms(ctx: StaticContext, node: ast.AST) -> Iterator[tuple[ast.AST, object]]:
    child, parent = node, ctx.parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.If):
            if child in parent.body:
                yield parent, "body"
            elif child in parent.orelse:
                yield parent, "orelse"
        elif isinstance(parent, ast.Match) and isinstance(child, ast.match_case):
            yield parent, id(child)
        child, parent = parent, ctx.parents.get(parent)


def _pos(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset


def _setter_text(ctx: StaticContext, event: PolicyEvent) -> str:
    text = ctx.segment(event.node.func)
    return f"{text}()" if len(text) <= 60 else "the policy call"


# ==================================================================== MP102

_TRAIN_METHODS = ("fit", "fit_generator", "train_on_batch")
_PURE_TO_MIXED = {"float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}
_FLOATX_SETTERS = tuple(name for name, floatx in POLICY_SETTERS.items() if floatx)


@static_check("MP102")
def check_pure_float16_policy(ctx: StaticContext) -> Iterable[Diagnostic]:
    pure = [e for e in ctx.policy_events if e.policy in _PURE_TO_MIXED]
    if not pure:
        return
    training = _training_calls(ctx)
    if not training:
        return  # inference-only scripts may use float16 on purpose
    explicit_policy = any(not POLICY_SETTERS[ctx.call_name(e.node)] and e.policy is not None
                          for e in ctx.policy_events)
    for event in pure:
        floatx = ctx.call_name(event.node) in _FLOATX_SETTERS
        if floatx and explicit_policy:
            continue  # an explicit global policy overrides floatx
        if event.scope is None and all(ctx.enclosing_function(t) is None and _pos(t) < _pos(event.node)
                                       for t in training):
            continue  # the policy only applies to code after all the training
        confidence = Confidence.HIGH
        built = _all_constructions(ctx)
        if built and not any(event.policy in ctx.layer_policies(lc) for lc in built):
            continue  # every layer here is built under another policy (or its own dtype)
        if not built:
            confidence = Confidence.MEDIUM  # the model is built in another module
        mixed = _PURE_TO_MIXED[event.policy]  # type: ignore[index]
        what = f"floatx {event.policy!r} (the default policy)" if floatx else f"global policy {event.policy!r}"
        message = (f"{what} in a script that trains: variables are stored in {event.policy} too, so small updates "
                   f"round away and optimizer state underflows (no loss scaling either); use {mixed!r}, which "
                   f"computes in {event.policy} with float32 variables")
        fix = _floatx_fix(ctx, event, mixed) if floatx else _policy_literal_fix(ctx, event, mixed)
        yield ctx.diagnostic("MP102", event.node, message, confidence=confidence, fix=fix)


def _all_constructions(ctx: StaticContext) -> list[LayerCall]:
    """Layer calls plus `keras.applications` model calls."""
    found = list(ctx.layer_calls)
    for call in ctx.calls:
        if _is_application(ctx, call):
            found.append(LayerCall(call, ctx.call_name(call), custom=False))  # type: ignore[arg-type]
    return found


def _training_calls(ctx: StaticContext) -> list[ast.Call]:
    found = []
    has_tape = False
    for call in ctx.calls:
        func = call.func
        if isinstance(func, ast.Attribute):
            if func.attr in _TRAIN_METHODS and not _non_keras_receiver(ctx, func.value):
                found.append(call)
            elif func.attr == "GradientTape":
                has_tape = True
        elif isinstance(func, ast.Name) and (ctx.call_name(call) or "").endswith("GradientTape"):
            has_tape = True
    if has_tape:
        for call in ctx.calls:
            func = call.func
            if isinstance(func, ast.Attribute) and (
                    func.attr == "apply_gradients"
                    or (func.attr == "apply" and "opt" in (ctx.segment(func.value) or "").lower())):
                found.append(call)
    return found


def _non_keras_receiver(ctx: StaticContext, receiver: ast.AST) -> bool:
    """`StandardScaler().fit(x)`, `scaler.fit(x)` with scaler from sklearn: not a Keras training call."""
    value = receiver
    if isinstance(receiver, ast.Name):
        value = ctx.last_assignment(receiver.id, receiver) or receiver
    if isinstance(value, ast.Call):
        name = ctx.call_name(value) or ""
        if name.startswith("keras.preprocessing."):  # ImageDataGenerator.fit computes feature statistics
            return True
        return bool(name) and not name.startswith(("keras.", "tf.", "hub."))
    return False


def _policy_literal_fix(ctx: StaticContext, event: PolicyEvent, mixed: str) -> Fix | None:
    arg = event.node.args[0] if event.node.args else (event.node.keywords[0].value if event.node.keywords else None)
    literal = _policy_literal(ctx, arg, 0)
    if literal is None:
        return None
    return Fix(f"use the {mixed!r} policy", (ctx.edit(literal, _quoted_like(ctx, literal, mixed)),))


def _policy_literal(ctx: StaticContext, expr: ast.AST | None, depth: int) -> ast.AST | None:
    """The node holding the policy value that can be replaced by a string literal."""
    if expr is None or depth > 3:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr
    if isinstance(expr, ast.Call) and ctx.call_name(expr) in POLICY_CONSTRUCTORS:
        inner = expr.args[0] if expr.args else next((k.value for k in expr.keywords if k.arg == "name"), None)
        return _policy_literal(ctx, inner, depth + 1)
    if isinstance(expr, ast.Attribute) and (ctx.resolve(expr) or "") in ("tf.float16", "tf.bfloat16", "tf.half"):
        return expr
    if isinstance(expr, ast.Name) and expr.id in ctx.module_constants:
        uses = [n for n in ctx.nodes if isinstance(n, ast.Name) and n.id == expr.id
                and isinstance(n.ctx, ast.Load)]
        if len(uses) == 1:  # edit the constant only when nothing else reads it
            return _policy_literal(ctx, ctx.module_constants[expr.id], depth + 1)
    return None


def _quoted_like(ctx: StaticContext, literal: ast.AST, value: str) -> str:
    text = ctx.segment(literal)
    quote = text[:1] if text[:1] in ("'", '"') and isinstance(literal, ast.Constant) else '"'
    return f"{quote}{value}{quote}"


def _floatx_fix(ctx: StaticContext, event: PolicyEvent, mixed: str) -> Fix | None:
    """`tf.keras.backend.set_floatx("float16")` -> `tf.keras.mixed_precision.set_global_policy("mixed_float16")`."""
    func = event.node.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute)
            and func.value.attr in ("backend", "config") and ctx.resolve(func.value.value) == "keras"):
        return None
    arg = event.node.args[0] if len(event.node.args) == 1 and not event.node.keywords else None
    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
        return None
    new = f"{ctx.segment(func.value.value)}.mixed_precision.set_global_policy({_quoted_like(ctx, arg, mixed)})"
    return Fix(f"set the {mixed!r} policy instead of floatx", (ctx.edit(event.node, new),), applicability="unsafe")


# ==================================================================== MP103

_EXPERIMENTAL = "keras.mixed_precision.experimental"
# experimental member -> current member in keras.mixed_precision (None: no mechanical replacement)
_EXPERIMENTAL_MEMBERS = {"set_policy": "set_global_policy", "global_policy": "global_policy", "Policy": "Policy",
                         "LossScaleOptimizer": "LossScaleOptimizer", "get_layer_policy": None}
_TF1_TRAIN_MEMBERS = {"enable_mixed_precision_graph_rewrite", "disable_mixed_precision_graph_rewrite", "LossScale",
                      "DynamicLossScale", "FixedLossScale", "MixedPrecisionLossScaleOptimizer"}
_COMPAT_V1 = ("tf.compat.v1.", "tensorflow.compat.v1.")
_TF1_GRAPH_MARKERS = ("Session", "placeholder", "disable_eager_execution", "disable_v2_behavior", "get_variable")
_USE_POLICY = 'use keras.mixed_precision.set_global_policy("mixed_float16") (and LossScaleOptimizer in custom loops)'


@static_check("MP103", requires=r"mixed_precision|get_scaled_loss|get_unscaled_gradients|LossScale")
def check_legacy_mixed_precision_api(ctx: StaticContext) -> Iterable[Diagnostic]:
    found = list(_legacy_imports(ctx))
    for node in ctx.nodes:
        if isinstance(node, (ast.Name, ast.Attribute)) and not _inner_of_chain(ctx, node):
            name = ctx.resolve(node)
            if name and not _harmless_tf1_reference(ctx, node, name):
                found += _legacy_reference(ctx, node, name)
    if ctx.is_keras3:
        found += _tf_keras_loss_scale_calls(ctx)
    guarded = _version_guarded_lines(ctx)
    return [d for d in found if d.location.line not in guarded]


def _harmless_tf1_reference(ctx: StaticContext, node: ast.AST, name: str) -> bool:
    """`tf.compat.v1.mixed_precision` still exists: naming its classes without calling them (isinstance checks,
    deserialisation tables of compatibility code) breaks nothing. Removed `experimental` names fail on any use."""
    if not name.startswith("tf.compat.v1.mixed_precision."):
        return False
    parent = ctx.parents.get(node)
    return not (isinstance(parent, ast.Call) and parent.func is node)


_GUARD_EXCEPTIONS = {"ImportError", "ModuleNotFoundError", "AttributeError", "Exception", "BaseException"}


def _version_guarded_lines(ctx: StaticContext) -> set[int]:
    """Lines of compatibility shims: a `try` body whose handler catches ImportError/AttributeError, or an `if`
    arm chosen by a version / `hasattr` test (`if tf.__version__ < "2.4":`)."""
    lines: set[int] = set()
    for node in ctx.nodes:
        blocks: list[list[ast.stmt]] = []
        if isinstance(node, ast.Try) and any(_catches_missing_api(h) for h in node.handlers):
            blocks.append(node.body)
        elif isinstance(node, ast.If) and _is_version_test(node.test):
            blocks += [node.body, node.orelse]
        for block in blocks:
            for stmt in block:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def _catches_missing_api(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((t.attr if isinstance(t, ast.Attribute) else getattr(t, "id", "")) in _GUARD_EXCEPTIONS for t in types)


def _is_version_test(test: ast.AST) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Attribute) and node.attr in ("__version__", "VERSION", "version"):
            return True
        if isinstance(node, ast.Name) and "version" in node.id.lower():
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr":
            return True
    return False


def _legacy_imports(ctx: StaticContext) -> Iterator[Diagnostic]:
    from mpdoctor.static.names import canonical

    for node in ctx.nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            full = [canonical(f"{node.module}.{a.name}") for a in node.names]
            if any(_is_experimental(n) for n in full):
                yield ctx.diagnostic("MP103", node, f"{_removed_experimental()}: this import raises ImportError; "
                                     f"import the non-experimental keras mixed_precision module",
                                     confidence=_experimental_confidence(), fix=_import_from_fix(ctx, node))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is_experimental(canonical(alias.name)):
                    yield ctx.diagnostic("MP103", node, f"{_removed_experimental()}: this import raises "
                                         f"ModuleNotFoundError", confidence=_experimental_confidence(),
                                         fix=_import_fix(ctx, node))


def _is_experimental(name: str) -> bool:
    return name == _EXPERIMENTAL or name.startswith(_EXPERIMENTAL + ".")


def _removed_experimental() -> str:
    return "tf.keras.mixed_precision.experimental was removed in TF 2.9 (absent from tf_keras and Keras 3)"


def _experimental_confidence() -> Confidence:
    tf = environment.tensorflow_version()
    return Confidence.LOW if tf is not None and tf < (2, 9) else Confidence.HIGH


def _import_from_fix(ctx: StaticContext, node: ast.ImportFrom) -> Fix | None:
    module = node.module or ""
    if module.endswith(".mixed_precision") and len(node.names) == 1 and node.names[0].name == "experimental":
        alias = node.names[0].asname or "experimental"
        parent = module.rsplit(".", 1)[0]
        suffix = "" if alias == "mixed_precision" else f" as {alias}"
        return Fix("import the non-experimental mixed_precision module",
                   (ctx.edit(node, f"from {parent} import mixed_precision{suffix}"),))
    if module.endswith(".mixed_precision.experimental"):
        names = []
        for a in node.names:
            new = _EXPERIMENTAL_MEMBERS.get(a.name)
            if new is None:
                return None
            local = a.asname or a.name
            names.append(new if new == local else f"{new} as {local}")
        return Fix("import from the non-experimental mixed_precision module",
                   (ctx.edit(node, f"from {module.rsplit('.', 1)[0]} import {', '.join(names)}"),))
    return None


def _import_fix(ctx: StaticContext, node: ast.Import) -> Fix | None:
    if len(node.names) != 1 or not node.names[0].asname or not node.names[0].name.endswith(".experimental"):
        return None
    module = node.names[0].name.rsplit(".", 1)[0]  # ...mixed_precision
    parent, _, last = module.rpartition(".")
    if last != "mixed_precision" or not parent:
        return None
    return Fix("import the non-experimental mixed_precision module",
               (ctx.edit(node, f"from {parent} import mixed_precision as {node.names[0].asname}"),))


def _inner_of_chain(ctx: StaticContext, node: ast.AST) -> bool:
    parent = ctx.parents.get(node)
    return isinstance(parent, ast.Attribute) and parent.value is node


def _legacy_reference(ctx: StaticContext, node: ast.AST, name: str) -> Iterator[Diagnostic]:
    parent = ctx.parents.get(node)
    call = parent if isinstance(parent, ast.Call) and parent.func is node else None
    target = call or node
    if _is_experimental(name):
        yield from _experimental_reference(ctx, node, call, name)
        return
    shown = ctx.segment(node) or name
    member = name.rsplit(".", 1)[-1]
    if name.startswith(_COMPAT_V1):
        rest = name.split(".compat.v1.", 1)[1]
        if rest.startswith("mixed_precision") or (rest.startswith("train.experimental.")
                                                  and member in _TF1_TRAIN_MEMBERS):
            yield _compat_v1_diagnostic(ctx, target, call, shown, member)
        return
    if name.startswith("tf.mixed_precision") or (name.startswith("tf.train.experimental.")
                                                 and member in _TF1_TRAIN_MEMBERS):
        tf = environment.tensorflow_version()
        yield ctx.diagnostic("MP103", target, f"{shown} no longer exists in TensorFlow 2 (AttributeError); "
                             f"{_USE_POLICY}",
                             confidence=Confidence.LOW if tf is not None and tf < (2, 4) else Confidence.HIGH,
                             fix=_graph_rewrite_fix(ctx, call) if "graph_rewrite" in member else None)


def _compat_v1_diagnostic(ctx: StaticContext, target: ast.AST, call: ast.Call | None, shown: str,
                          member: str) -> Diagnostic:
    graph_code = _tf1_graph_code(ctx)
    if "graph_rewrite" in member and graph_code:
        message = (f"{shown} is the deprecated TF1 mixed precision graph rewrite: it still runs with "
                   f"tf.compat.v1.train optimizers in graph mode, but raises ValueError for Keras optimizers and has "
                   f"no TF2 equivalent of the same name; {_USE_POLICY}")
    elif "graph_rewrite" in member:
        message = (f"{shown} is the deprecated TF1 mixed precision graph rewrite: it raises ValueError for Keras "
                   f"optimizers (Keras 3 and tf_keras), refuses a mixed Keras policy and does nothing for eager "
                   f"code; {_USE_POLICY}")
    else:
        message = (f"{shown} is a deprecated TF1 loss-scaling API that Keras optimizers do not accept; use "
                   f"keras.mixed_precision.LossScaleOptimizer (dynamic loss scaling by default)")
    if call is not None and call.args and _is_keras_optimizer(ctx, call.args[0]):
        confidence = Confidence.HIGH
    elif graph_code:
        confidence = Confidence.LOW  # still runs with tf.compat.v1.train optimizers in graph mode
    else:
        confidence = Confidence.MEDIUM
    fix = _graph_rewrite_fix(ctx, call) if member == "enable_mixed_precision_graph_rewrite" else None
    return ctx.diagnostic("MP103", target, message, confidence=confidence, fix=fix)


def _graph_rewrite_fix(ctx: StaticContext, call: ast.Call | None) -> Fix | None:
    """`enable_mixed_precision_graph_rewrite(keras_optimizer)` -> `keras.mixed_precision.LossScaleOptimizer(...)`,
    with `set_global_policy("mixed_float16")` after the imports when the file sets no policy. Unsafe: every layer
    then computes in float16 (what the rewrite meant to do, but outputs and custom layers may need fixes too)."""
    if call is None or len(call.args) != 1 or call.keywords or not _is_keras_optimizer(ctx, call.args[0]):
        return None  # a tf.compat.v1.train optimizer in graph mode: the rewrite still works there
    keras = module_alias(ctx, "keras", "tf_keras", "tensorflow.keras")
    if keras is None:
        tf = module_alias(ctx, "tensorflow")
        if tf is None:
            return None
        keras = f"{tf}.keras"
    edits = [ctx.edit(call, f"{keras}.mixed_precision.LossScaleOptimizer({ctx.segment(call.args[0])})")]
    if not ctx.policy_events:
        policy = after_imports(ctx, call, f'\n{keras}.mixed_precision.set_global_policy("mixed_float16")\n')
        if policy is None:
            return None
        edits.insert(0, policy)
    elif not all(e.policy == "mixed_float16" for e in ctx.policy_events):
        return None  # another policy is set on purpose: not ours to change
    return Fix("use the mixed_float16 policy and wrap the optimizer in LossScaleOptimizer", tuple(edits),
               applicability="unsafe")


def _is_keras_optimizer(ctx: StaticContext, expr: ast.AST) -> bool:
    if isinstance(expr, ast.Name):
        expr = ctx.last_assignment(expr.id, expr) or expr
    return isinstance(expr, ast.Call) and (ctx.call_name(expr) or "").startswith("keras.optimizers.")


def _tf1_graph_code(ctx: StaticContext) -> bool:
    if any(m.startswith("tensorflow.compat.v1") and m.count(".") == 2 for m in ctx.imports.aliases.values()):
        return True
    for call in ctx.calls:
        name = ctx.call_name(call) or ""
        if name.startswith(_COMPAT_V1) and name.rsplit(".", 1)[-1] in _TF1_GRAPH_MARKERS:
            return True
    return False


def _experimental_reference(ctx: StaticContext, node: ast.AST, call: ast.Call | None, name: str
                            ) -> Iterator[Diagnostic]:
    member = name[len(_EXPERIMENTAL) + 1:]
    target = call or node
    spelled = _experimental_attribute(ctx, node)  # `...mixed_precision.experimental` written out in this expression
    if not member:  # the module object itself: reported when written out, else its import already is
        if spelled is not None:
            yield ctx.diagnostic("MP103", target, f"{_removed_experimental()}; use keras.mixed_precision",
                                 confidence=_experimental_confidence())
        return
    new_member = _EXPERIMENTAL_MEMBERS.get(member)
    if spelled is not None:
        new_func = f"{ctx.segment(spelled.value)}.{new_member}" if spelled is getattr(node, "value", None) else None
        renamed = True  # `.experimental` must go
    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):  # alias of the experimental module
        new_func, renamed = f"{node.value.id}.{new_member}", new_member != member
    elif isinstance(node, ast.Name):  # imported from the experimental module: its import fix renames it
        new_func, renamed = node.id, False
    else:
        return
    needs_change, fix = renamed, None
    if new_member is None or new_func is None:
        needs_change = True
        if member == "get_layer_policy" and call is not None:
            fix = _get_layer_policy_fix(ctx, call)
    elif member == "LossScaleOptimizer" and call is not None and _has_loss_scale(call):
        needs_change, fix = True, _loss_scale_optimizer_fix(ctx, call, new_func)
    elif member == "Policy" and call is not None and _has_loss_scale(call):
        needs_change = True  # the loss scale moved to the optimizer: not a mechanical edit
    elif renamed:
        fix = Fix(f"use {new_member}", (ctx.edit(node, new_func),))
    if not needs_change:
        return
    current = f"keras.mixed_precision.{new_member}" if new_member else "the current keras.mixed_precision API"
    hint = ""
    if member in ("LossScaleOptimizer", "Policy") and call is not None and _has_loss_scale(call):
        hint = " without a loss_scale argument (dynamic loss scaling is the default)"
    if member == "get_layer_policy":
        current = "layer.dtype_policy"
    yield ctx.diagnostic("MP103", target, f"mixed_precision.experimental.{member} was removed in TF 2.9 (absent "
                         f"from tf_keras and Keras 3); use {current}{hint}", confidence=_experimental_confidence(),
                         fix=fix)


def _has_loss_scale(call: ast.Call) -> bool:
    return len(call.args) > 1 or any(k.arg == "loss_scale" for k in call.keywords)


def _experimental_attribute(ctx: StaticContext, node: ast.AST) -> ast.Attribute | None:
    """The `<mixed_precision>.experimental` Attribute written out inside a chain:
    `tf.keras.mixed_precision.experimental`, or `mixed_precision.experimental` with `mixed_precision` the current
    module."""
    while isinstance(node, ast.Attribute):
        if node.attr == "experimental" and ctx.resolve(node.value) == "keras.mixed_precision":
            return node
        node = node.value
    return None


def _loss_scale_optimizer_fix(ctx: StaticContext, call: ast.Call, new_func: str) -> Fix | None:
    """`LossScaleOptimizer(opt, "dynamic")` / `(opt, loss_scale="dynamic")` / `(opt)` -> `LossScaleOptimizer(opt)`."""
    args, keywords = list(call.args), list(call.keywords)
    inner = args.pop(0) if args else next((k.value for k in keywords if k.arg in ("optimizer", "opt")), None)
    keywords = [k for k in keywords if k.value is not inner]
    scale = args.pop(0) if args else next((k.value for k in keywords if k.arg == "loss_scale"), None)
    keywords = [k for k in keywords if k.arg != "loss_scale"]
    if inner is None or args or keywords or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    if scale is not None and not (isinstance(scale, ast.Constant) and scale.value == "dynamic"):
        return None  # a fixed loss scale has no one-to-one replacement
    return Fix("use LossScaleOptimizer (dynamic loss scaling)", (ctx.edit(call, f"{new_func}({ctx.segment(inner)})"),))


def _get_layer_policy_fix(ctx: StaticContext, call: ast.Call) -> Fix | None:
    if len(call.args) == 1 and not call.keywords and isinstance(call.args[0], (ast.Name, ast.Attribute)):
        return Fix("read layer.dtype_policy", (ctx.edit(call, f"{ctx.segment(call.args[0])}.dtype_policy"),))
    return None


def _tf_keras_loss_scale_calls(ctx: StaticContext) -> Iterator[Diagnostic]:
    defined = {n.name for n in ctx.nodes if isinstance(n, FUNCTION_NODES)}
    confidence = Confidence.HIGH if ctx.keras_version.certain else Confidence.MEDIUM
    for call in ctx.calls:
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr in defined:
            continue
        single = len(call.args) == 1 and not call.keywords and not isinstance(call.args[0], ast.Starred)
        if func.attr == "get_scaled_loss":
            fix = Fix("use scale_loss", (ctx.edit(func, f"{ctx.segment(func.value)}.scale_loss"),)) if single else None
            message = (f"{ctx.segment(func)}() is the tf_keras LossScaleOptimizer API: Keras 3 optimizers have no "
                       f"get_scaled_loss (AttributeError); use optimizer.scale_loss(loss)")
        elif func.attr == "get_unscaled_gradients":
            fix = (Fix("drop the unscaling: apply_gradients unscales on Keras 3",
                       (ctx.edit(call, ctx.segment(call.args[0])),)) if single else None)
            message = (f"{ctx.segment(func)}() is the tf_keras LossScaleOptimizer API: Keras 3 optimizers have no "
                       f"get_unscaled_gradients (AttributeError); pass the gradients of the scaled loss straight "
                       f"to apply_gradients / apply, which unscale them")
        else:
            continue
        yield ctx.diagnostic("MP103", call, message, confidence=confidence, fix=fix)


# ==================================================================== MP104

_SEQUENTIAL = ("keras.Sequential", "keras.models.Sequential")
_KERAS_INPUTS = ("keras.Input", "keras.layers.Input", "keras.input")


@static_check("MP104", requires=r"KerasLayer")
def check_hub_layer_on_keras3(ctx: StaticContext) -> Iterable[Diagnostic]:
    version = ctx.keras_version
    if version.major < 3:
        return
    for call in ctx.calls_named("hub.KerasLayer"):
        how = _keras3_use(ctx, call)
        if how is None:
            continue
        if how == "functional":
            failure = '"A KerasTensor cannot be used as input to a TensorFlow function"'
        else:
            failure = '"Only instances of keras.Layer can be added to a Sequential model"'
        message = (f"hub.KerasLayer is a tf_keras (Keras 2) layer and this file runs on Keras 3: {_HOW[how]} "
                   f"fails with {failure}; use tf_keras with TF_USE_LEGACY_KERAS=1 set before importing TensorFlow, "
                   f"or keras.layers.TFSMLayer")
        yield ctx.diagnostic("MP104", call, message, notes=(f"Keras 3: {version.reason}",),
                             confidence=Confidence.HIGH if version.certain else Confidence.MEDIUM)


_HOW = {"sequential": "adding it to a Keras 3 Sequential model", "add": "adding it with model.add()",
        "functional": "calling it on a Keras 3 symbolic tensor"}


def _keras3_use(ctx: StaticContext, layer: ast.Call) -> str | None:
    """How the hub layer constructed by `layer` enters a Keras 3 model, or None when it never visibly does."""
    how = _use_at(ctx, layer)
    if how:
        return how
    parent = ctx.parents.get(layer)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        name = parent.targets[0].id
        for node in ctx.nodes:
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                bound = ctx.layer_instance(node)
                how = _use_at(ctx, node) if bound is not None and bound.node is layer else None
                if how:
                    return how
    return None


def _use_at(ctx: StaticContext, node: ast.AST) -> str | None:
    parent = ctx.parents.get(node)
    if isinstance(parent, (ast.List, ast.Tuple)):
        holder = ctx.parents.get(parent)
        if isinstance(holder, ast.keyword):
            holder = ctx.parents.get(holder)
        if isinstance(holder, ast.Call) and ctx.call_name(holder) in _SEQUENTIAL:
            return "sequential"
    if isinstance(parent, ast.Call):
        if parent.func is node and parent.args and _is_keras_tensor(ctx, parent.args[0], 0):
            return "functional"
        if (node in parent.args and isinstance(parent.func, ast.Attribute) and parent.func.attr == "add"
                and _is_sequential(ctx, parent.func.value)):
            return "add"
    return None


def _is_sequential(ctx: StaticContext, expr: ast.AST) -> bool:
    if isinstance(expr, ast.Name):
        expr = ctx.last_assignment(expr.id, expr) or expr
    return isinstance(expr, ast.Call) and ctx.call_name(expr) in _SEQUENTIAL


def _is_keras_tensor(ctx: StaticContext, expr: ast.AST, depth: int) -> bool:
    """A symbolic Keras tensor: `keras.Input(...)`, a layer applied to one, `model.output`, or a name bound to one."""
    if depth > 8:
        return False
    if isinstance(expr, ast.Name):
        value = ctx.last_assignment(expr.id, expr)
        return value is not None and _is_keras_tensor(ctx, value, depth + 1)
    if isinstance(expr, ast.Subscript):
        return _is_keras_tensor(ctx, expr.value, depth + 1)
    if isinstance(expr, ast.Attribute):
        return expr.attr in ("input", "inputs", "output", "outputs") and not (
            isinstance(expr.value, ast.Name) and expr.value.id == "self")
    if isinstance(expr, ast.Call):
        if ctx.call_name(expr) in _KERAS_INPUTS:
            return True
        if ctx.producer(expr) is not None and expr.args:
            return _is_keras_tensor(ctx, expr.args[0], depth + 1)
    return False


# ---------------------------------------------------------------- trace forms


@trace_check("MP102")
def trace_pure_float16_policy(facts: dict, ctx: TraceContext) -> Iterable[Diagnostic]:
    """The run ends under a pure float16/bfloat16 policy and a compiled (to be trained) model has float16 weights."""
    policy = final_policy(facts)
    if policy not in ("float16", "bfloat16"):
        return []
    compiled = [m for m in facts.get("models", []) if m.get("compiled")]
    if not compiled:
        return []
    events = [e for e in facts.get("policy_events", []) if e.get("policy") == policy]
    where = events[-1]["location"] if events else None
    names = ", ".join(f"`{m['name']}`" for m in compiled[:3])
    return [ctx.diagnostic("MP102", where, f"policy \"{policy}\" is in force when {names} is compiled: its "
                           f"variables are {policy} too, so small updates round to zero and Adam's moments "
                           f"overflow; use \"mixed_{policy}\" (float32 variables, {policy} compute)")]


@trace_check("MP104")
def trace_hub_layer_on_keras3(facts: dict, ctx: TraceContext) -> Iterable[Diagnostic]:
    verdict = exception_verdict(facts)
    if not verdict or verdict.get("code") != "MP104" or keras_major(facts) < 3:
        return []
    hub_loads = [load for load in facts.get("savedmodel_loads", []) if load.get("api") == "hub.KerasLayer"]
    where = hub_loads[-1]["location"] if hub_loads else facts["exception"].get("location")
    return [ctx.diagnostic("MP104", where, "hub.KerasLayer is a tf_keras layer and this run uses Keras 3: the "
                           "model fails to build (" + first_message_line(facts["exception"]["message"]) + "); set "
                           "TF_USE_LEGACY_KERAS=1 before importing TensorFlow and use tf_keras, or load the "
                           "SavedModel with keras.layers.TFSMLayer")]


@trace_check("MP101")
def trace_policy_after_layers(facts: dict, ctx: TraceContext) -> Iterable[Diagnostic]:
    """A float16 policy set on import after layers were created under another policy. Layers whose creating line
    also ran after the policy change (a builder called once for a float32 reference, once for the real model)
    are the comparison pattern, not a mistake."""
    uids = list(facts.get("layers", {}))
    imported = uids[:facts.get("layers_created_on_import", len(uids))]
    found = []
    for event in facts.get("policy_events", []):
        if not is_float16_compute(event.get("policy")):
            continue
        before = imported[:event.get("layers_before", 0)]
        rebuilt = {_line(facts["layers"][uid]) for uid in imported[len(before):]}
        stale = [facts["layers"][uid] for uid in before
                 if facts["layers"][uid].get("explicit_dtype") is None
                 and facts["layers"][uid].get("policy") != event["policy"]
                 and facts["layers"][uid].get("class") != "InputLayer" and not facts["layers"][uid].get("is_model")
                 and _line(facts["layers"][uid]) not in rebuilt]
        if not stale:
            continue
        first = stale[0]
        found.append(ctx.diagnostic(
            "MP101", event.get("location"), f"the policy becomes \"{event['policy']}\" after {len(stale)} layer(s) "
            f"were created under \"{first.get('policy')}\" (first: {first.get('class')} `{first.get('name')}` at "
            f"line {_line(first) or '?'}); they keep \"{first.get('policy')}\": set the policy before building "
            f"the model"))
    return found


def _line(record: dict) -> int | None:
    return (record.get("created_at") or {}).get("line")
