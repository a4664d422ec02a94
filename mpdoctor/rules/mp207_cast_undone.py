"""MP207 cast-undone-by-autocast: a float32 cast right before a layer that autocasts it back to float16."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic, Fix
from mpdoctor.facts.dtypes import compute_dtype, is_float16_compute, low_precision
from mpdoctor.facts.keras_semantics import layer_class_autocasts
from mpdoctor.facts.records import LayerRecord
from mpdoctor.registry import FLOAT16_TEXT, define_rule, static_check, trace_check
from mpdoctor.static.astutil import has_star_kwargs
from mpdoctor.static.context import StaticContext
from mpdoctor.static.pairing import any_cast32, functional_pairs, sequential_pairs
from mpdoctor.static.policies import dtype_keyword
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts

define_rule(
    "MP207",
    "cast-undone-by-autocast",
    "warning",
    "ST",
    True,
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
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.Input((20,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Lambda(lambda x: keras.ops.cast(x, "float32")),   # undone by the next layer
            keras.layers.Dense(1),                                          # casts its input back to float16
        ])
        """,
    good="""
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.Input((20,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(1, dtype="float32"),   # computes in float32, casts its own input
        ])
        """,
    fix="""
        Adds `dtype="float32"` to the constructor of the consuming layer (only when that constructor is a literal
        call with no `dtype=` or `**kwargs` of its own). The cast itself is left in place; it is now merely
        redundant and can be deleted by hand.
        """,
)


@static_check("MP207", requires=(FLOAT16_TEXT, r"cast"))
def check_cast_undone_by_autocast(ctx: StaticContext) -> Iterable[Diagnostic]:
    if not any_cast32(ctx):
        return
    found: dict[ast.AST, list[tuple[LayerRecord, str]]] = {}  # cast node -> consuming layers (with policy)
    unknown_input: set[ast.AST] = set()  # casts whose input may be an integer tensor (a real conversion)
    for cast, consumer, input_known in [*sequential_pairs(ctx), *functional_pairs(ctx)]:
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


def _cast_diagnostic(
    ctx: StaticContext, cast: ast.AST, consumers: list[tuple[LayerRecord, str]], input_known: bool
) -> Diagnostic:
    first, policy = consumers[0]
    compute = compute_dtype(policy)
    name = first.label
    others = f" (and {len(consumers) - 1} more layer{'s' if len(consumers) > 2 else ''})" if len(consumers) > 1 else ""
    message = cast_undone("this cast to float32", f"{name} (line {first.node.lineno}", policy, compute, name, others)
    edits = []
    for consumer, _ in consumers:
        if not _can_add_dtype(ctx, consumer):
            edits = []
            break
        edits += ctx.add_keyword_fix(consumer.node, "dtype", '"float32"', "").edits
    fix = None
    if edits:
        names = ", ".join(dict.fromkeys(c.kind for c, _ in consumers))
        fix = Fix(f'compute {names} in float32 (dtype="float32"); the cast before it becomes redundant', tuple(edits))
    policies = [ctx.layer_policies(c) for c, _ in consumers]
    certain = input_known and all(all(is_float16_compute(p) for p in ps) for ps in policies)
    return ctx.diagnostic("MP207", cast, message, confidence=Confidence.HIGH if certain else Confidence.MEDIUM, fix=fix)


def cast_undone(
    cast: str, consumer: str, policy: str | None, compute: str | None, target: str, others: str = ""
) -> str:
    """MP207 in the words of both passes: `consumer` is "Dense (line 12" statically, "`dense_1` (Dense" when traced
    (the parenthesis closes after the policy)."""
    return (
        f'{cast} is undone: {consumer}, policy "{policy}") autocasts its input back to {compute}{others}; put '
        f'dtype="float32" on {target} instead to compute it in float32'
    )


def _undoing_policy(ctx: StaticContext, consumer: LayerRecord) -> str | None:
    """The float16/bfloat16 policy under which `consumer` autocasts a float32 input back down, else None."""
    if not layer_class_autocasts(consumer.kind, ctx.keras_version.major):
        return None
    if consumer.custom:
        cls = ctx.custom_layer_classes.get(consumer.qualname)
        if cls is None or ctx.is_custom_model(cls) or "autocast" in ctx.segment(cls):
            return None
    return ctx.float16_policy(ctx.layer_policies(consumer))


def _can_add_dtype(ctx: StaticContext, consumer: LayerRecord) -> bool:
    call = consumer.node
    if dtype_keyword(call) is not None or has_star_kwargs(call):
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


@trace_check("MP207")
def trace_cast_undone_by_autocast(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    """A Lambda that casts to float32 (per its source line) whose output feeds, as an autocast argument, a layer
    computing in float16: the graph shows the consumer's input after autocast is float16 again."""
    found = []
    for _, graph in facts.graphs():
        nodes = {n.id: n for n in graph.nodes}
        for edge in graph.edges:
            source, target = nodes.get(edge.source), nodes.get(edge.target)
            if not source or not target or source.class_name != "Lambda":
                continue
            line = source.created_at.line if source.created_at else None
            text = ctx.static.lines[line - 1] if ctx.static and line and line <= len(ctx.static.lines) else ""
            if "cast" not in text or "float32" not in text:
                continue
            index = edge.arg_index or 0
            predicted = target.predicted_input_dtypes
            after = predicted[index] if index < len(predicted) else None
            if target.autocast and low_precision(after):
                found.append(
                    ctx.diagnostic(
                        "MP207",
                        source.created_at,
                        cast_undone(
                            f"the cast to float32 in `{source.id}`",
                            f"`{target.id}` ({target.class_name}",
                            target.policy,
                            after,
                            f"`{target.id}`",
                        ),
                        layer=source.id,
                    )
                )
    return found
