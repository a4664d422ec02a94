"""MP103 legacy-mixed-precision-api: mixed-precision APIs that were removed (or are wrong on Keras 3)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator

from mpdoctor.diagnostics import Confidence, Diagnostic, Fix
from mpdoctor.facts.tf_releases import (
    FIRST_CURRENT_MIXED_PRECISION,
    FIRST_NEW_KERAS_OPTIMIZERS,
    Removal,
    removal_of,
)
from mpdoctor.project.evidence import shim_lines
from mpdoctor.registry import absorbs_crash, define_rule, static_check
from mpdoctor.static.context import StaticContext
from mpdoctor.static.edits import after_imports, module_alias
from mpdoctor.static.loss_scaling_port import SCALE, port_halves

define_rule(
    "MP103",
    "legacy-mixed-precision-api",
    "error",
    "S",
    True,
    summary="A removed or TF1-only mixed precision API (`mixed_precision.experimental`, the graph rewrite, "
    "`get_scaled_loss` on Keras 3).",
    what="""
        Uses of mixed precision APIs that do not exist, or no longer work, on the TensorFlow/Keras the file
        targets (`mpdoctor check --show-target FILE`: the configuration, the project's declared dependencies,
        the file's own code, then the installed environment). What was removed where is one table
        (mpdoctor/facts/tf_releases.py):
        - `tf.keras.mixed_precision.experimental.*` (`set_policy`, `Policy`, `LossScaleOptimizer`,
          `global_policy`, `get_layer_policy`), including `from tensorflow.keras.mixed_precision import
          experimental as mixed_precision`: removed in TF 2.9 (absent from tf_keras and Keras 3);
        - `tf.train.experimental.enable_mixed_precision_graph_rewrite` and the `LossScale` classes,
          `tf.mixed_precision.experimental.*`: removed from TF2's namespace (still there in TF 2.4 and 2.8
          respectively, absent from TF 2.21);
        - `tf.compat.v1.mixed_precision.*` / `tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite`:
          still importable, but the rewrite raises ValueError for the Keras optimizers of TF >= 2.11 (Keras 3,
          tf_keras) and refuses a mixed Keras policy; in TF1 graph-mode code, where it still runs with
          `tf.compat.v1.train` optimizers, it is reported with low confidence and TF1-era advice;
        - `tf.contrib.mixed_precision.*` (TF1's `LossScaleOptimizer`, `ExponentialUpdateLossScaleManager`,
          `FixedLossScaleManager`), imported or used: `tf.contrib` is gone from TensorFlow 2 (not reported on a
          TF 1.x target);
        - on a Keras 3 target, `optimizer.get_scaled_loss(...)` / `optimizer.get_unscaled_gradients(...)` (the
          tf_keras `LossScaleOptimizer` API; valid, and not reported, on a Keras 2 target).
        An API that exists on every release of the target is not reported; one missing from only part of the
        target range (an unpinned or wide range) is reported with low confidence and names the target.
        Compatibility shims are not reported: code in a `try` whose handler catches ImportError / AttributeError,
        or in an `if` on a version or `hasattr` test.
        """,
    why="""
        The script fails at import or at the first call (ImportError / AttributeError / ValueError), or, for the
        TF1 rewrite, silently does nothing in eager TF2 code.
        """,
    bad="""
        import tensorflow as tf
        from tensorflow.keras.mixed_precision import experimental as mixed_precision   # removed in TF 2.9

        mixed_precision.set_policy("mixed_float16")
        model = tf.keras.Sequential([tf.keras.Input((20,)), tf.keras.layers.Dense(1, dtype="float32")])
        opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(), "dynamic")
        model.compile(optimizer=opt, loss="mse")
        """,
    good="""
        import tensorflow as tf
        from tensorflow.keras import mixed_precision

        mixed_precision.set_global_policy("mixed_float16")
        model = tf.keras.Sequential([tf.keras.Input((20,)), tf.keras.layers.Dense(1, dtype="float32")])
        opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())   # dynamic loss scaling by default
        model.compile(optimizer=opt, loss="mse")
        """,
    fix="""
        Mechanical rewrites spelled the way the file spells them: the `experimental` import becomes `from
        tensorflow.keras import mixed_precision` (keeping the alias), `experimental.set_policy` -> `set_global_policy`,
        `experimental.Policy(name, loss_scale="dynamic")` -> `Policy(name)`, `experimental.LossScaleOptimizer(opt,
        "dynamic")` -> `LossScaleOptimizer(opt)`, `get_layer_policy(layer)` -> `layer.dtype_policy`; on Keras 3
        `opt.get_scaled_loss(loss)` -> `opt.scale_loss(loss)` (under a `hasattr(opt, "get_scaled_loss")` guard, False on
        Keras 3, the arm that leaves the loss unscaled gets `opt.scale_loss(loss)` instead, so the shim scales on both
        Keras lines) and `opt.get_unscaled_gradients(grads)` -> `grads` (`apply_gradients` unscales), unless the
        gradients are clipped, accumulated, all-reduced, transformed or applied through the inner optimizer before that
        apply: then neither half of the port is made, in the whole class (or module) that holds them, and each finding
        says why. The graph rewrite of a Keras optimizer becomes `keras.mixed_precision.LossScaleOptimizer(opt)` plus
        `set_global_policy("mixed_float16")` after the imports when the file sets no policy (unsafe: every layer then
        computes in float16). No fix for a fixed numeric loss scale, the LossScale classes or the rewrite of a TF1
        optimizer in graph code (it still works there), nor when the target includes TensorFlow releases before 2.4 (the
        current API would not run there).
        """,
)


_EXPERIMENTAL = "keras.mixed_precision.experimental"
# experimental member -> current member in keras.mixed_precision (None: no mechanical replacement)
_EXPERIMENTAL_MEMBERS = {
    "set_policy": "set_global_policy",
    "global_policy": "global_policy",
    "Policy": "Policy",
    "LossScaleOptimizer": "LossScaleOptimizer",
    "get_layer_policy": None,
}
_TF1_TRAIN_MEMBERS = {
    "enable_mixed_precision_graph_rewrite",
    "disable_mixed_precision_graph_rewrite",
    "LossScale",
    "DynamicLossScale",
    "FixedLossScale",
    "MixedPrecisionLossScaleOptimizer",
}
_COMPAT_V1 = ("tf.compat.v1.", "tensorflow.compat.v1.")
_TF1_GRAPH_MARKERS = ("Session", "placeholder", "disable_eager_execution", "disable_v2_behavior", "get_variable")
_USE_POLICY = 'use keras.mixed_precision.set_global_policy("mixed_float16") (and LossScaleOptimizer in custom loops)'
# TF1 graph code has no Keras policy to move to: the advice of the graph rewrite's own era.
_TF1_ADVICE = (
    "in TF1 graph code keep tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite with a "
    "tf.compat.v1.train optimizer and train with opt.minimize() (gradients taken otherwise are not loss-scaled)"
)


@static_check("MP103", requires=r"mixed_precision|get_scaled_loss|get_unscaled_gradients|LossScale")
def check_legacy_mixed_precision_api(ctx: StaticContext) -> Iterable[Diagnostic]:
    found = list(_legacy_imports(ctx))
    for node, name in ctx.imported_names(_LEGACY_PARTS):
        if name.startswith(_LEGACY_PREFIXES) and not _harmless_tf1_reference(ctx, node, name):
            found += _legacy_reference(ctx, node, name)
    shims: list[Diagnostic] = []
    if ctx.is_keras3:
        plain, shims = _tf_keras_loss_scale_calls(ctx)
        found += plain
    guarded = shim_lines(ctx.nodes_of(ast.Try, ast.If))
    return [d for d in found if d.location.line not in guarded] + shims


def _harmless_tf1_reference(ctx: StaticContext, node: ast.AST, name: str) -> bool:
    """`tf.compat.v1.mixed_precision` still exists: naming its classes without calling them (isinstance checks,
    deserialisation tables of compatibility code) breaks nothing. Removed `experimental` names fail on any use."""
    if not name.startswith("tf.compat.v1.mixed_precision."):
        return False
    parent = ctx.parents.get(node)
    return not (isinstance(parent, ast.Call) and parent.func is node)


def _legacy_imports(ctx: StaticContext) -> Iterator[Diagnostic]:
    from mpdoctor.static.names import canonical

    for node in sorted(ctx.nodes_of(ast.Import, ast.ImportFrom), key=lambda n: (n.lineno, n.col_offset)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            full = [canonical(f"{node.module}.{a.name}") for a in node.names]
            if any(_is_contrib(n) for n in full):
                yield from _contrib_finding(ctx, node, f"this import of {_CONTRIB}")
                continue
            if not any(_is_experimental(n) for n in full):
                continue
            reported, confidence = _verdict(ctx, _EXPERIMENTAL)
            if reported:
                yield ctx.diagnostic(
                    "MP103",
                    node,
                    f"{_removed_experimental(ctx)}: this import raises ImportError; "
                    f"import the non-experimental keras mixed_precision module",
                    confidence=confidence,
                    fix=_import_from_fix(ctx, node) if _current_api_runs(ctx) else None,
                )
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is_contrib(canonical(alias.name)):
                    yield from _contrib_finding(ctx, node, f"this import of {_CONTRIB}")
                    continue
                if not _is_experimental(canonical(alias.name)):
                    continue
                reported, confidence = _verdict(ctx, _EXPERIMENTAL)
                if reported:
                    yield ctx.diagnostic(
                        "MP103",
                        node,
                        f"{_removed_experimental(ctx)}: this import raises ModuleNotFoundError",
                        confidence=confidence,
                        fix=_import_fix(ctx, node) if _current_api_runs(ctx) else None,
                    )


_CONTRIB = "tf.contrib.mixed_precision"
_CONTRIB_GONE = "is TF1's loss scaling: tf.contrib was removed in TensorFlow 2 (ImportError / AttributeError)"
_CONTRIB_ADVICE = (
    'use keras.mixed_precision.set_global_policy("mixed_float16") and keras.mixed_precision.LossScaleOptimizer '
    "(dynamic loss scaling by default)"
)


def _is_contrib(name: str) -> bool:
    return name == _CONTRIB or name.startswith(_CONTRIB + ".")


def _contrib_finding(ctx: StaticContext, node: ast.AST, subject: str) -> Iterator[Diagnostic]:
    """tf.contrib is there on every TF 1.x release: reported only on a target that has TF 2 in it (at low
    confidence when the target also has TF 1.x releases)."""
    reported, confidence = _verdict(ctx, _CONTRIB)
    if reported:
        message = (
            f"{subject} {_CONTRIB_GONE}{_on(ctx, removal_of(_CONTRIB))}; {_CONTRIB_ADVICE}; {_NOT_FIXED}"
            "TF1's loss scaling has no mechanical Keras rewrite (the model and its training loop change with it)"
        )
        yield ctx.diagnostic("MP103", node, message, confidence=confidence)


def _is_experimental(name: str) -> bool:
    return name == _EXPERIMENTAL or name.startswith(_EXPERIMENTAL + ".")


def _removed_experimental(ctx: StaticContext) -> str:
    return f"tf.keras.mixed_precision.experimental was removed in TF 2.9 (absent from tf_keras and Keras 3){_on(ctx)}"


def _on(ctx: StaticContext, removal: Removal | None = None) -> str:
    """Which part of the target the removal concerns, when it matters: " (target: ...)"."""
    removal = removal or removal_of(_EXPERIMENTAL)
    if removal.verdict(ctx.target.releases) == "some":
        return f" on part of the target ({ctx.target.summary()})"
    return ctx.target.note()


def _verdict(ctx: StaticContext, name: str) -> tuple[bool, Confidence]:
    """Whether a removed API is reported on this file's target, and how surely: missing from every release of
    the target: high; from some (or not known for some): low; from none: not reported."""
    verdict = removal_of(name).verdict(ctx.target.releases)
    return verdict != "none", Confidence.HIGH if verdict == "all" else Confidence.LOW


def _current_api_runs(ctx: StaticContext) -> bool:
    """A fix to the non-experimental keras.mixed_precision API runs on every release of the target."""
    return ctx.target.at_least(FIRST_CURRENT_MIXED_PRECISION)


def _import_from_fix(ctx: StaticContext, node: ast.ImportFrom) -> Fix | None:
    module = node.module or ""
    if module.endswith(".mixed_precision") and len(node.names) == 1 and node.names[0].name == "experimental":
        alias = node.names[0].asname or "experimental"
        parent = module.rsplit(".", 1)[0]
        suffix = "" if alias == "mixed_precision" else f" as {alias}"
        return Fix(
            "import the non-experimental mixed_precision module",
            (ctx.edit(node, f"from {parent} import mixed_precision{suffix}"),),
        )
    if module.endswith(".mixed_precision.experimental"):
        names = []
        for a in node.names:
            new = _EXPERIMENTAL_MEMBERS.get(a.name)
            if new is None:
                return None
            local = a.asname or a.name
            names.append(new if new == local else f"{new} as {local}")
        return Fix(
            "import from the non-experimental mixed_precision module",
            (ctx.edit(node, f"from {module.rsplit('.', 1)[0]} import {', '.join(names)}"),),
        )
    return None


def _import_fix(ctx: StaticContext, node: ast.Import) -> Fix | None:
    if len(node.names) != 1 or not node.names[0].asname or not node.names[0].name.endswith(".experimental"):
        return None
    module = node.names[0].name.rsplit(".", 1)[0]  # ...mixed_precision
    parent, _, last = module.rpartition(".")
    if last != "mixed_precision" or not parent:
        return None
    return Fix(
        "import the non-experimental mixed_precision module",
        (ctx.edit(node, f"from {parent} import mixed_precision as {node.names[0].asname}"),),
    )


# Every name _legacy_reference may report starts with one of these (most imported names are layers and ops).
_LEGACY_PREFIXES = (_EXPERIMENTAL, _CONTRIB, *_COMPAT_V1, "tf.mixed_precision", "tf.train.experimental.")
# A name with one of these prefixes has one of these components as written (canonical() renames only the root).
_LEGACY_PARTS = frozenset({"experimental", "compat", "mixed_precision"})


def _legacy_reference(ctx: StaticContext, node: ast.AST, name: str) -> Iterator[Diagnostic]:
    parent = ctx.parents.get(node)
    call = parent if isinstance(parent, ast.Call) and parent.func is node else None
    target = call or node
    if _is_experimental(name):
        yield from _experimental_reference(ctx, node, call, name)
        return
    shown = ctx.segment(node) or name
    member = name.rsplit(".", 1)[-1]
    if _is_contrib(name):
        if isinstance(getattr(node, "ctx", None), (ast.Store, ast.Del)):
            return  # `LossScaleOptimizer = None` in a shim's fallback binds the name, it does not use TF1
        yield from _contrib_finding(ctx, target, shown)
        return
    if name.startswith(_COMPAT_V1):
        if _deprecated_compat_v1(ctx, name, member):
            yield _compat_v1_diagnostic(ctx, target, call, shown, member)
        return
    removed = _removed_tf1_api(ctx, target, call, shown, name, member)
    if removed is not None:
        yield removed


def _deprecated_compat_v1(ctx: StaticContext, name: str, member: str) -> bool:
    """`tf.compat.v1.mixed_precision...` / `tf.compat.v1.train.experimental.<loss scaling>` on a TF 2 target."""
    rest = name.split(".compat.v1.", 1)[1]
    tf1_target = all(r[0] == 1 for r in ctx.target.releases)  # tf.compat.v1 is then the native API
    return not tf1_target and (
        rest.startswith("mixed_precision") or (rest.startswith("train.experimental.") and member in _TF1_TRAIN_MEMBERS)
    )


def _removed_tf1_api(
    ctx: StaticContext, target: ast.AST, call: ast.Call | None, shown: str, name: str, member: str
) -> Diagnostic | None:
    """`tf.mixed_precision...` / `tf.train.experimental.<loss scaling>`, removed from TF 2."""
    removal = removal_of(name)
    if removal is None or not (
        name.startswith("tf.mixed_precision")
        or (name.startswith("tf.train.experimental.") and member in _TF1_TRAIN_MEMBERS)
    ):
        return None
    reported, confidence = _verdict(ctx, name)
    if not reported:
        return None  # there on every release of the target (TF1 code on TF 1.14/1.15, a pin to TF 2.4...)
    advice = _TF1_ADVICE if _tf1_graph_code(ctx) else _USE_POLICY
    fix = _graph_rewrite_fix(ctx, call) if "graph_rewrite" in member else None
    message = f"{shown} was {removal.removed_text}: it raises AttributeError{_on(ctx, removal)}; {advice}"
    return ctx.diagnostic("MP103", target, message + _tf1_refusal(ctx, member, fix), confidence=confidence, fix=fix)


def _tf1_refusal(ctx: StaticContext, member: str, fix: Fix | None) -> str:
    """Why a TF1 loss-scaling API has no fix (nothing when it has one, or in TF1 graph code told to keep it)."""
    if fix is not None:
        return ""
    if "graph_rewrite" not in member:
        return f"; {_NOT_FIXED}the LossScale classes have no one-to-one Keras replacement"
    if _tf1_graph_code(ctx):
        return ""  # the advice is to keep it there
    return (
        f"; {_NOT_FIXED}the rewrite is given an optimizer that is not a Keras optimizer built in this file, or the "
        "target or the policies set leave no single mechanical rewrite"
    )


def _compat_v1_diagnostic(
    ctx: StaticContext, target: ast.AST, call: ast.Call | None, shown: str, member: str
) -> Diagnostic:
    graph_code = _tf1_graph_code(ctx)
    keras_optimizer = call is not None and call.args and _is_keras_optimizer(ctx, call.args[0])
    if "graph_rewrite" in member and graph_code and not keras_optimizer:
        message = (
            f"{shown} is the deprecated TF1 mixed precision graph rewrite: it still runs with "
            f"tf.compat.v1.train optimizers in graph mode on every TensorFlow 2 release, but not with Keras "
            f"optimizers; {_TF1_ADVICE}"
        )
    elif "graph_rewrite" in member:
        message = (
            f"{shown} is the deprecated TF1 mixed precision graph rewrite: it raises ValueError for the Keras "
            f"optimizers of TF >= 2.11 (Keras 3 and tf_keras), refuses a mixed Keras policy and does nothing for "
            f"eager code{ctx.target.note()}; {_TF1_ADVICE if graph_code else _USE_POLICY}"
        )
    else:
        message = (
            f"{shown} is a deprecated TF1 loss-scaling API that Keras optimizers do not accept; use "
            f"keras.mixed_precision.LossScaleOptimizer (dynamic loss scaling by default)"
        )
    if keras_optimizer:
        # The rewrite wrapped the old Keras OptimizerV2 until TF 2.10; the new optimizers of TF >= 2.11 fail.
        releases = ctx.target.releases
        if all(r >= FIRST_NEW_KERAS_OPTIMIZERS for r in releases):
            confidence = Confidence.HIGH
        else:
            confidence = Confidence.MEDIUM if any(r >= FIRST_NEW_KERAS_OPTIMIZERS for r in releases) else Confidence.LOW
    elif graph_code:
        confidence = Confidence.LOW  # still runs with tf.compat.v1.train optimizers in graph mode
    else:
        confidence = Confidence.MEDIUM
    fix = _graph_rewrite_fix(ctx, call) if member == "enable_mixed_precision_graph_rewrite" else None
    return ctx.diagnostic("MP103", target, message + _tf1_refusal(ctx, member, fix), confidence=confidence, fix=fix)


def _graph_rewrite_fix(ctx: StaticContext, call: ast.Call | None) -> Fix | None:
    """`enable_mixed_precision_graph_rewrite(keras_optimizer)` -> `keras.mixed_precision.LossScaleOptimizer(...)`,
    with `set_global_policy("mixed_float16")` after the imports when the file sets no policy. Unsafe: every layer
    then computes in float16 (what the rewrite meant to do, but outputs and custom layers may need fixes too)."""
    if call is None or len(call.args) != 1 or call.keywords or not _is_keras_optimizer(ctx, call.args[0]):
        return None  # a tf.compat.v1.train optimizer in graph mode: the rewrite still works there
    if not _current_api_runs(ctx):
        return None  # the target includes releases without keras.mixed_precision.LossScaleOptimizer
    keras = module_alias(ctx.semantic, "keras", "tf_keras", "tensorflow.keras")
    if keras is None:
        tf = module_alias(ctx.semantic, "tensorflow")
        if tf is None:
            return None
        keras = f"{tf}.keras"
    edits = [ctx.edit(call, f"{keras}.mixed_precision.LossScaleOptimizer({ctx.segment(call.args[0])})")]
    if not ctx.policy_events:
        policy = after_imports(ctx.semantic, call, f'\n{keras}.mixed_precision.set_global_policy("mixed_float16")\n')
        if policy is None:
            return None
        edits.insert(0, policy)
    elif not all(e.policy == "mixed_float16" for e in ctx.policy_events):
        return None  # another policy is set on purpose: not ours to change
    return Fix(
        "use the mixed_float16 policy and wrap the optimizer in LossScaleOptimizer",
        tuple(edits),
        applicability="unsafe",
    )


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


def _experimental_reference(
    ctx: StaticContext, node: ast.AST, call: ast.Call | None, name: str
) -> Iterator[Diagnostic]:
    member = name[len(_EXPERIMENTAL) + 1 :]
    target = call or node
    reported, confidence = _verdict(ctx, _EXPERIMENTAL)
    if not reported:
        return  # every release of the target has it (a pin to TF < 2.9)
    spelled = _experimental_attribute(ctx, node)  # `...mixed_precision.experimental` written out in this expression
    if not member:  # the module object itself: reported when written out, else its import already is
        if spelled is not None:
            yield ctx.diagnostic(
                "MP103",
                target,
                f"{_removed_experimental(ctx)}; use keras.mixed_precision",
                confidence=confidence,
            )
        return
    new_member = _EXPERIMENTAL_MEMBERS.get(member)
    spelling = _new_spelling(ctx, node, spelled, member, new_member)
    if spelling is None:
        return
    needs_change, fix = _experimental_change(ctx, node, call, member, new_member, *spelling)
    if not needs_change:
        return
    message = (
        f"mixed_precision.experimental.{member} was removed in TF 2.9 (absent "
        f"from tf_keras and Keras 3){_on(ctx)}; use {_current_spelling(call, member, new_member)}"
    )
    if not _current_api_runs(ctx):
        fix = None
        message += f"; {_NOT_FIXED}the target includes TensorFlow releases before 2.4, which lack the current API"
    elif fix is None:
        message += f"; {_NOT_FIXED}{_why_no_experimental_fix(call, member)}"
    yield ctx.diagnostic("MP103", target, message, confidence=confidence, fix=fix)


_NOT_FIXED = "not fixed automatically: "


def _why_no_experimental_fix(call: ast.Call | None, member: str) -> str:
    """Why a reference to a removed experimental member has no mechanical rewrite."""
    if member in ("LossScaleOptimizer", "Policy") and call is not None and _has_loss_scale(call):
        scale = (
            call.args[1]
            if len(call.args) > 1
            else next((k.value for k in call.keywords if k.arg == "loss_scale"), None)
        )
        if not (isinstance(scale, ast.Constant) and scale.value in _DEFAULT_LOSS_SCALES):
            return (
                "a loss scale other than dynamic has no one-to-one replacement "
                "(keras.mixed_precision.LossScaleOptimizer(opt, dynamic=False, initial_scale=N) on tf_keras)"
            )
    if member == "get_layer_policy":
        return "only get_layer_policy(layer) with a plain layer name or attribute is rewritten"
    return "the call is not in a form that is rewritten mechanically (extra or unpacked arguments)"


def _new_spelling(
    ctx: StaticContext, node: ast.AST, spelled: ast.Attribute | None, member: str, new_member: str | None
) -> tuple[str | None, bool] | None:
    """(the reference written without `.experimental`, or None when it cannot be; whether the text must change), or
    None for a reference that is none of the shapes below."""
    if spelled is not None:
        new_func = f"{ctx.segment(spelled.value)}.{new_member}" if spelled is getattr(node, "value", None) else None
        return new_func, True  # `.experimental` must go
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):  # alias of the experimental module
        return f"{node.value.id}.{new_member}", new_member != member
    if isinstance(node, ast.Name):  # imported from the experimental module: its import fix renames it
        return node.id, False
    return None


def _experimental_change(
    ctx: StaticContext,
    node: ast.AST,
    call: ast.Call | None,
    member: str,
    new_member: str | None,
    new_func: str | None,
    renamed: bool,
) -> tuple[bool, Fix | None]:
    """(whether the reference must change, the fix)."""
    if new_member is None or new_func is None:
        fix = _get_layer_policy_fix(ctx, call) if member == "get_layer_policy" and call is not None else None
        return True, fix
    if member == "LossScaleOptimizer" and call is not None and _has_loss_scale(call):
        return True, _loss_scale_optimizer_fix(ctx, call, new_func)
    if member == "Policy" and call is not None and _has_loss_scale(call):
        return True, _policy_fix(ctx, call, new_func)
    if renamed:
        return True, Fix(f"use {new_member}", (ctx.edit(node, new_func),))
    return False, None


def _current_spelling(call: ast.Call | None, member: str, new_member: str | None) -> str:
    """What to use instead of `mixed_precision.experimental.<member>`."""
    if member == "get_layer_policy":
        return "layer.dtype_policy"
    current = f"keras.mixed_precision.{new_member}" if new_member else "the current keras.mixed_precision API"
    if member in ("LossScaleOptimizer", "Policy") and call is not None and _has_loss_scale(call):
        current += " without a loss_scale argument (dynamic loss scaling is the default)"
    return current


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


# The loss scales a policy named that a mixed policy now has by itself (compile wraps the optimizer in a dynamic
# LossScaleOptimizer; custom loops never read the policy's): dropping them changes nothing. A fixed scale does.
_DEFAULT_LOSS_SCALES = ("dynamic", "auto", None)


def _policy_fix(ctx: StaticContext, call: ast.Call, new_func: str) -> Fix | None:
    """`Policy("mixed_float16", loss_scale="dynamic")` -> `Policy("mixed_float16")` (the current Policy takes no
    loss_scale: keeping it raises TypeError)."""
    args, keywords = list(call.args), list(call.keywords)
    name = args.pop(0) if args else next((k.value for k in keywords if k.arg == "name"), None)
    scale = args.pop(0) if args else next((k.value for k in keywords if k.arg == "loss_scale"), None)
    rest = [k for k in keywords if k.value is not name and k.value is not scale]
    if name is None or args or rest or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    if not (isinstance(scale, ast.Constant) and scale.value in _DEFAULT_LOSS_SCALES):
        return None
    return Fix("use Policy without loss_scale", (ctx.edit(call, f"{new_func}({ctx.segment(name)})"),))


def _get_layer_policy_fix(ctx: StaticContext, call: ast.Call) -> Fix | None:
    if len(call.args) == 1 and not call.keywords and isinstance(call.args[0], (ast.Name, ast.Attribute)):
        return Fix("read layer.dtype_policy", (ctx.edit(call, f"{ctx.segment(call.args[0])}.dtype_policy"),))
    return None


def _tf_keras_loss_scale_calls(ctx: StaticContext) -> tuple[list[Diagnostic], list[Diagnostic]]:
    """(the findings of tf_keras loss-scaling calls on Keras 3, those of `hasattr` shims that never scale there:
    no version guard hides these)."""
    halves = port_halves(ctx, fixable_target=ctx.keras_version.certain)
    if not halves:
        return [], []
    confidence = Confidence.HIGH if ctx.keras_version.certain else Confidence.MEDIUM
    on = ctx.target.note() or ("" if ctx.keras_version.certain else f" (target: {ctx.target.summary()})")
    plain: list[Diagnostic] = []
    shims: list[Diagnostic] = []
    for half in halves:
        func = half.call.func
        assert isinstance(func, ast.Attribute)
        if half.guard is not None:
            message = (
                f"{ctx.segment(half.guard)} is False on Keras 3 (its optimizers have no get_scaled_loss){on}, so "
                f"{ctx.segment(func)}() never runs and the loss is never scaled: a LossScaleOptimizer's apply then "
                f"divides gradients of an unscaled loss by the loss scale (updates 2**15 times too small); scale "
                f"with optimizer.scale_loss(loss) where get_scaled_loss does not exist"
            )
        elif func.attr == SCALE:
            message = (
                f"{ctx.segment(func)}() is the tf_keras LossScaleOptimizer API: Keras 3 optimizers have no "
                f"get_scaled_loss (AttributeError){on}; use optimizer.scale_loss(loss)"
            )
        else:
            message = (
                f"{ctx.segment(func)}() is the tf_keras LossScaleOptimizer API: Keras 3 optimizers have no "
                f"get_unscaled_gradients (AttributeError){on}; pass the gradients of the scaled loss straight "
                f"to apply_gradients / apply, which unscale them"
            )
        if half.refused:
            message = f"{message}; {half.refused}"
        found = ctx.diagnostic("MP103", half.call, message, confidence=confidence, fix=half.fix)
        (plain if half.guard is None else shims).append(found)
    return plain, shims


@absorbs_crash("MP103")
def removed_api_crash(crash: Diagnostic, finding: Diagnostic) -> bool:
    """A trace crash on a line this rule reports is the removed API failing to import or resolve, and an
    AttributeError naming the method of a finding (`get_scaled_loss`) is that call failing wherever it surfaced (a
    `tf.function` raises at its caller's line): reported once, as MP103 (static-only), not again as MP001."""
    if finding.location.line == crash.location.line:
        return re.search(r"raised (ImportError|ModuleNotFoundError|AttributeError)\b", crash.message) is not None
    missing = re.search(r"raised AttributeError\b.*has no attribute '(\w+)'", crash.message)
    return missing is not None and f".{missing.group(1)}()" in finding.message
