"""MP101 policy-set-after-layers: a global policy set after layers or models were created; they keep the old one."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic, Severity
from mpdoctor.facts.dtypes import is_float16_compute
from mpdoctor.facts.keras_semantics import POLICY_NEUTRAL_LAYERS, SAVEDMODEL_LAYERS, model_factory
from mpdoctor.facts.records import LayerRecord, PolicyEvent
from mpdoctor.registry import define_rule, static_check, trace_check
from mpdoctor.static.astutil import position
from mpdoctor.static.context import StaticContext
from mpdoctor.static.policies import dtype_keyword
from mpdoctor.static.topology import is_application
from mpdoctor.static.tree_index import FUNCTION_NODES
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts

define_rule(
    "MP101",
    "policy-set-after-layers",
    "warning",
    "ST",
    False,
    summary="A float16 global policy is set after layers or models were already created; those keep the old one.",
    what="""
        A layer reads the global dtype policy once, when it is constructed, and keeps it. MP101 reports a global
        policy call (`set_global_policy`, `set_dtype_policy`, `set_floatx`) that switches to a float16/bfloat16
        compute policy AFTER layers or models were already built earlier in the same run: lexically earlier in
        the same scope, or inside a local function called earlier in that scope (`model = build_model()` before
        the policy call), or, when the policy is set in a function that then fits or runs a model it receives,
        built by its caller before the call (`model = load_model()` then `fine_tune(model)`), also when the caller
        and the builder are other modules of the project (an entry point's `main()` in main.py).
        `keras.applications` models and local Layer/Model subclasses count, and so do models made without a
        Keras constructor: transformers `TFAutoModel*.from_pretrained(...)` and `TF*Model(config)`,
        keras-hub / keras-nlp / keras-cv `*.from_preset(...)`, and loaded models (`keras.models.load_model`,
        `tf.saved_model.load`, `hub.load`), which keep the dtypes they were saved with. The message names the
        first such layer and its line.

        Not reported: layers built inside a function that is only called after the policy call; layers with an
        explicit `dtype=`; `Input`/`InputLayer` and preprocessing layers (Rescaling, Random*, Normalization...);
        resetting to `float32` at the end of a script (a common cleanup); switching between two low-precision
        policies (`mixed_bfloat16` -> `mixed_float16`); a builder called both before and after
        the policy call, or a `clear_session()` between the two (comparing a float32 and a mixed model on
        purpose); code in the other branch of an `if`. The static pass does not follow methods, nor
        imported builders other than through the project's entry points; the trace pass sees the real construction
        order.
        """,
    why="""
        Layers built before the call keep computing (and storing variables) in the old policy, usually
        float32: the model silently runs with no mixed precision at all, or only partly (a float32 backbone
        under a float16 head), with none of the expected speed or memory savings.
        """,
    bad="""
        import keras

        base = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(224, 224, 3))
        keras.mixed_precision.set_global_policy("mixed_float16")   # too late: ResNet50 stays float32
        x = keras.layers.GlobalAveragePooling2D()(base.output)
        outputs = keras.layers.Dense(10, activation="softmax", dtype="float32")(x)
        model = keras.Model(base.input, outputs)
        """,
    good="""
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")   # first, before building anything
        base = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(224, 224, 3))
        x = keras.layers.GlobalAveragePooling2D()(base.output)
        outputs = keras.layers.Dense(10, activation="softmax", dtype="float32")(x)
        model = keras.Model(base.input, outputs)
        """,
    fix="No autofix: move the policy call above the code that builds the model (usually right after the imports).",
)


_CLEAR_SESSION = ("keras.backend.clear_session", "keras.utils.clear_session")


@static_check("MP101")
def check_policy_after_layers(ctx: StaticContext) -> Iterable[Diagnostic]:
    for event in ctx.policy_events:
        if not is_float16_compute(event.policy):
            continue  # float32 at the end of a script is a cleanup; unknown values stay quiet
        # constructions that ran under a float32/float64 (or unknown) policy; switching between two low-precision
        # policies is deliberate
        found = [
            item
            for item in _built_before(ctx, event)
            if not any(is_float16_compute(p) for p in ctx.policies_at(item[0]))
        ]
        if not found:
            elsewhere = _built_in_other_modules(ctx, event)
            if elsewhere is not None and not any(is_float16_compute(p) for p in elsewhere[1]):
                old_text = "/".join(sorted(p or "an unknown policy" for p in elsewhere[1]))
                built = f"the model it is given was built by {elsewhere[0]}"
                message = set_too_late(_setter_text(ctx, event.node), event.policy, built, old_text)
                yield ctx.diagnostic("MP101", event.node, message, confidence=Confidence.MEDIUM)
            continue
        (site, layer, via), *others = found
        old = ctx.policies_at(site)
        old_text = "/".join(sorted(p or "an unknown policy" for p in old))
        factory = model_factory(ctx.call_name(layer.node))
        shown = f"{_callee_text(ctx, layer.node)}()" if factory else layer.kind
        built = f"{shown} (line {layer.node.lineno})"
        if via is not None:
            built = f"{via.func.id}() (line {via.lineno}) built {built}"  # type: ignore[attr-defined]
        else:
            built = f"{built} was {'loaded' if factory == 'loaded' else 'built'}"
        more = f" (and {len(others)} more construction{'s' if len(others) > 1 else ''})" if others else ""
        loaded = factory == "loaded" and not others
        confidence = Confidence.MEDIUM if None in old else Confidence.HIGH
        setter = _setter_text(ctx, event.node)
        if event.scope is None and _used_before(ctx, event.node) and not _may_build_after(ctx, event.node):
            # the last word of a script or notebook: nothing is built after it, so it changes nothing (issue 29)
            note = ctx.diagnostic(
                "MP101", event.node, no_effect(setter, event.policy, built + more), confidence=confidence
            )
            yield replace(note, severity=Severity.INFO)
            continue
        message = set_too_late(setter, event.policy, built + more, old_text, loaded)
        yield ctx.diagnostic("MP101", event.node, message, confidence=confidence)


# Method calls after the policy call that neither build layers nor run a model (anything else may: a later `fit`
# means the policy was meant for the model it trains, and is a warning).
_HARMLESS = frozenset(
    {"summary", "get_weights", "plot", "show", "append", "format", "numpy", "mean", "sum", "update", "items",
     "keys", "values", "join", "head", "to_csv", "savefig", "info", "write"}
)  # fmt: skip
_BUILTINS = frozenset(dir(builtins))


_RUNS_A_MODEL = frozenset({"fit", "fit_generator", "predict", "evaluate", "train_on_batch", "predict_on_batch"})


def _used_before(ctx: StaticContext, setter: ast.AST) -> bool:
    """A model was trained or run before the policy call: the script (notebook) was done with it."""
    return any(
        isinstance(call.func, ast.Attribute) and call.func.attr in _RUNS_A_MODEL and position(call) < position(setter)
        for call in ctx.calls
    )


def _may_build_after(ctx: StaticContext, setter: ast.AST) -> bool:
    """Some call after the module-level `setter` may build layers or run a model: a construction, a function of the
    file that builds, a function not of the file (an imported builder), or a method not known to do neither
    (`tuner.search` builds models, `model.fit` trains one)."""
    for call in ctx.calls:
        if position(call) <= position(setter) or ctx.enclosing_function(call) is not None:
            continue
        if _construction(ctx, call) is not None:
            return True
        func = call.func
        if isinstance(func, ast.Name):
            local = _local_function(ctx, call)
            if local is not None and _first_construction_in(ctx, local, frozenset()) is None:
                continue
            if local is None and func.id in _BUILTINS:
                continue
            return True
        if (
            isinstance(func, ast.Attribute)
            and func.attr not in _HARMLESS
            and not (ctx.call_name(call) or "").startswith(
                ("np.", "numpy.", "tf.", "math.", "os.", "json.", "plt.", "matplotlib.")
            )
        ):
            return True
    return False


def no_effect(setter: str, policy: str | None, built: str) -> str:
    return (
        f'{setter} sets "{policy}" after {built}, and nothing is built after it: the call has no effect (layers '
        "keep the policy in force when they are created); set the policy before building the model if it was meant "
        "for it"
    )


def _built_before(ctx: StaticContext, event: PolicyEvent) -> list[tuple[ast.Call, LayerRecord, ast.Call | None]]:
    """(site, layer, via) for each construction that runs before `event` in its scope, in source order: `site` is
    the layer call itself or the call of a local builder function `via` whose body constructs `layer`."""
    scope = event.scope or ctx.tree
    start = _last_clear_session(ctx, scope, event.node)
    after_calls = {
        n.func.id
        for n in ctx.walk_scope(scope)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and position(n) > position(event.node)
    }
    found = []
    for node in ctx.walk_scope(scope):
        if not isinstance(node, ast.Call) or not (start < position(node) < position(event.node)):
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
    return sorted(found, key=lambda item: position(item[0])) or _built_by_callers(ctx, event)


_USES_MODEL = ("fit", "fit_generator", "train_on_batch", "evaluate", "predict")


def _built_by_callers(ctx: StaticContext, event: PolicyEvent) -> list[tuple[ast.Call, LayerRecord, ast.Call | None]]:
    """The order of calls, not of statements (issue 29): the policy is set in a function that then trains or runs a
    model it receives (`def fine_tune(model): ...; set_global_policy(...); model.fit(...)`), and a caller built
    that model before calling it (`model = load_model()` then `fine_tune(model)`): built under the old policy."""
    function = event.scope
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    models = _model_parameters(ctx, event, function)
    found = []
    for call in ctx.calls:
        if (
            not (isinstance(call.func, ast.Name) and call.func.id == function.name)
            or _local_function(ctx, call) is not function
        ):
            continue
        for index, name in models:
            argument = (
                call.args[index]
                if index < len(call.args)
                else next((k.value for k in call.keywords if k.arg == name), None)
            )
            value = ctx.last_assignment(argument.id, call) if isinstance(argument, ast.Name) else None
            if isinstance(value, ast.Call):
                found += _made_by(ctx, value)
    return found


def _model_parameters(ctx: StaticContext, event: PolicyEvent, function: ast.FunctionDef | ast.AsyncFunctionDef):
    """(index, name) of the parameters the function trains or runs a model through after the policy call, never
    rebinding them: a model its caller made."""
    params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    assigned = {n.id for n in ctx.walk_scope(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    used = {
        n.func.value.id
        for n in ctx.walk_scope(function)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in _USES_MODEL
        and isinstance(n.func.value, ast.Name)
        and position(n) > position(event.node)
    }
    return [(index, name) for index, name in enumerate(params) if name in used and name not in assigned]


def _built_in_other_modules(ctx: StaticContext, event: PolicyEvent) -> tuple[str, tuple[str | None, ...]] | None:
    """The same order of calls across modules (issue 29): the project analysis saw an entry point elsewhere pass
    this function a model that a project builder made before the call (`model = load_model()` in main.py, then
    `fine_tune(model)`): (where it was built, the policies in force there)."""
    project, function = ctx.settings.project, event.scope
    if project is None or not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    qualname = ctx.semantic.qualname(function)
    for _, name in _model_parameters(ctx, event, function):
        built = project.built_arguments.get((qualname, name))
        if built is not None:
            return built
    return None


def _made_by(ctx: StaticContext, value: ast.Call) -> list[tuple[ast.Call, LayerRecord, ast.Call | None]]:
    layer = _construction(ctx, value)
    if layer is not None:
        return [(value, layer, None)]
    builder = _local_function(ctx, value)
    built = _first_construction_in(ctx, builder, frozenset()) if builder is not None else None
    return [(value, built, value)] if built is not None else []


def _construction(ctx: StaticContext, call: ast.Call) -> LayerRecord | None:
    """A layer/model constructor call that takes the global policy: no explicit dtype, not an input or
    preprocessing layer; `keras.applications` models and the model factories of keras_semantics (pretrained
    models, presets, loaded models) included."""
    layer = ctx.layer_call(call)
    factory = model_factory(ctx.call_name(call))
    if factory == "loaded" and _wrapped_in_savedmodel_layer(ctx, call):
        return None  # `hub.KerasLayer(tf.saved_model.load(path))`: the layer made later takes the policy
    if layer is None and (is_application(ctx, call) or factory):
        layer = ctx.layer_record(call, ctx.call_name(call))
    if layer is None or layer.kind in POLICY_NEUTRAL_LAYERS or dtype_keyword(call) is not None:
        return None
    return layer


def _wrapped_in_savedmodel_layer(ctx: StaticContext, call: ast.Call) -> bool:
    """A loaded SavedModel handed to `hub.KerasLayer` / `TFSMLayer`, directly or through the name it is bound to."""
    parent = ctx.parents.get(call)
    names = (
        {parent.targets[0].id} if isinstance(parent, ast.Assign) and isinstance(parent.targets[0], ast.Name) else set()
    )
    for layer in ctx.layer_calls:
        if layer.qualname in SAVEDMODEL_LAYERS and layer.node.args:
            handle = layer.node.args[0]
            if handle is call or (isinstance(handle, ast.Name) and handle.id in names):
                return True
    return False


def _first_construction_in(ctx: StaticContext, function: ast.AST, visiting: frozenset) -> LayerRecord | None:
    if function in visiting or len(visiting) > 6:
        return None
    visiting = visiting | {function}
    for node in sorted((n for n in ctx.walk_scope(function) if isinstance(n, ast.Call)), key=position):
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
    positions = [
        position(n)
        for n in ctx.walk_scope(scope)
        if isinstance(n, ast.Call) and ctx.call_name(n) in _CLEAR_SESSION and position(n) < position(before)
    ]
    return max(positions, default=(0, 0))


def _exclusive_branches(ctx: StaticContext, a: ast.AST, b: ast.AST) -> bool:
    """True when `a` and `b` sit in different arms of the same `if` (or `match`), so never both run."""
    arms_of_b = dict(_arms(ctx, b))
    return any(owner in arms_of_b and arms_of_b[owner] != arm for owner, arm in _arms(ctx, a))


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


def _callee_text(ctx: StaticContext, call: ast.Call) -> str:
    text = ctx.segment(call.func)
    return text if len(text) <= 60 else text.rsplit(".", 1)[-1]


def _setter_text(ctx: StaticContext, call: ast.Call | None) -> str:
    """The policy call as the file spells it: `keras.mixed_precision.set_global_policy()`."""
    text = ctx.segment(call.func) if call is not None else ""
    return f"{text}()" if text and len(text) <= 60 else "the policy call"


def set_too_late(setter: str, policy: str | None, built: str, old: str, loaded: bool = False) -> str:
    """MP101 in the words of both passes: what was built before the policy call (`Conv2D (line 8) was built`
    statically, `4 layers were built (first: ...)` when traced), what it computes in, and what to do. A model
    loaded from a file (`load_model`) keeps the dtypes it was saved with whatever the policy: its advice differs."""
    if loaded:
        consequence = (
            f"a loaded model keeps the dtypes it was saved with, so it still computes in {old}; build the model in "
            "code after setting the policy and load only its weights"
        )
    else:
        consequence = (
            f"layers keep the policy in force when they are created, so they still compute in {old}; set the "
            "policy before building the model"
        )
    return f'{setter} sets "{policy}" only after {built}: {consequence}'


@trace_check("MP101")
def trace_policy_after_layers(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    """A float16 policy set on import after layers were created under another policy. Layers whose creating line
    also ran after the policy change (a builder called once for a float32 reference, once for the real model)
    are the comparison pattern, not a mistake."""
    records = list(facts.layers.values())
    imported = records[: len(records) if facts.layers_created_on_import is None else facts.layers_created_on_import]
    found = []
    for event in facts.policy_events:
        if not is_float16_compute(event.policy):
            continue
        stale = _stale_layers(ctx, imported, event.layers_before or 0, event.policy)
        if not stale:
            continue
        first = stale[0]
        line = event.location.line if event.location else None
        call = ctx.call_at(line, "set_global_policy", "set_dtype_policy", "set_floatx", "set_policy")
        setter = _setter_text(ctx.static, call) if call is not None else f"{event.api}()"
        loaded = all(_made_by_factory(ctx, record) == "loaded" for record in stale)
        count = f"{len(stale)} layer{'s were' if len(stale) > 1 else ' was'} {'loaded' if loaded else 'built'}"
        built = f"{count} (first: {first.class_name} `{first.name}`, line {_line(first) or '?'})"
        static = ctx.static
        last_word = call is not None and static is not None and static.enclosing_function(call) is None
        if last_word and _used_before(static, call) and not _may_build_after(static, call):  # type: ignore[arg-type]
            note = ctx.diagnostic("MP101", event.location, no_effect(setter, event.policy, built))
            found.append(replace(note, severity=Severity.INFO))
            continue
        message = set_too_late(setter, event.policy, built, first.policy or "?", loaded)
        found.append(ctx.diagnostic("MP101", event.location, message))
    return found


def _stale_layers(ctx: TraceContext, imported: list[LayerRecord], before: int, policy: str | None) -> list[LayerRecord]:
    """The first `before` layers created on import that keep another policy than `policy`: not models or inputs,
    with no dtype of their own (one a factory gave them does not count), their line not run again later."""
    rebuilt = {_line(record) for record in imported[before:]}
    return [
        record
        for record in imported[:before]
        if (record.explicit_dtype is None or _made_by_factory(ctx, record))
        and record.policy != policy
        and record.class_name != "InputLayer"
        and not record.is_model
        and _line(record) not in rebuilt
    ]


def _made_by_factory(ctx: TraceContext, record: LayerRecord) -> str | None:
    """'loaded' / 'built' for a layer created by a call of a model factory in this file
    (`tf_keras.models.load_model(...)`): an explicit `dtype` there came from the saved config, not from the user,
    so the global policy set later still does not reach the layer."""
    if ctx.static is None or record.created_at is None or ctx.shown(record.created_at.file) != ctx.display_path:
        return None
    call = ctx.call_at(record.created_at.line)
    return model_factory(ctx.static.call_name(call)) if call is not None else None


def _line(record: LayerRecord) -> int | None:
    return record.created_at.line if record.created_at else None
