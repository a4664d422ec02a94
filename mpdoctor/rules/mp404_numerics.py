"""MP404 non-finite-activation and MP405 precision-divergence: float16 vs float32 layer by layer on a sample batch."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Diagnostic, Severity
from mpdoctor.facts.dtypes import FLOAT16_MIN_NORMAL
from mpdoctor.facts.records import FAILED_BUILD, SourceRef
from mpdoctor.registry import define_rule, trace_check, verdict_of
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts, GraphNode, ModelGraph, NumericsRow

# MP405: relative error (max |y16 - y32| / max |y32|) above which a layer diverges; [tool.mpdoctor]
# numerics-threshold overrides it. Measured on ResNet50 / MobileNetV2 (weights=None): at most 0.37 % per layer in
# float16, so 5 % leaves a 10x margin.
DEFAULT_THRESHOLD = 0.05
# The threshold is stated for float16; bfloat16 keeps 8 significand bits instead of 11, so its rounding (and any
# cancellation) is 8x larger: measured on ResNet50 / MobileNetV2 under mixed_bfloat16, up to 1.3-2.1 % per layer.
BFLOAT16_SCALE = 8.0

define_rule(
    "MP404",
    "non-finite-activation",
    "error",
    "T",
    False,
    summary="A layer output becomes inf/NaN under the float16 policy but stays finite in float32.",
    what="""
        The trace pass runs a sample batch through the model twice, once under the file's float16 policy and
        once with every layer switched to float32 (same weights: `mixed_*` variables are float32), and names the
        FIRST layer (in topological order: the order its call returns, so layers inside a nested model or custom
        block come before the block) whose output contains inf or NaN in float16 while the float32 run stays
        finite, with the op that produced the first inf/NaN (`Rsqrt`, `Exp`, `AddV2`, `Mul`...: that layer is
        re-run on its float16 inputs under `tf.debugging.enable_check_numerics`).

        The sample batch follows the model's inputs: their structure (a dict of named inputs, as keras-hub text
        models take, or nested lists), float inputs uniform in `sample-range` (default [0, 1), seeded by
        `sample-seed`), integer ids within the vocabulary of the Embedding they feed (zero when none), masks 1
        with a padded tail; dimensions the model leaves open (`input_shape=None`) get the size it declares, else
        the smallest size from 32 up for which no layer output is empty (by shape inference). `--sample
        FILE.npz` supplies your own (arrays named like the inputs; e.g. padded or constant rows that a random
        batch never has). A layer whose float32 output is empty or non-finite is never judged. Built-in layers
        that compute their statistics in float32 (LayerNormalization, BatchNormalization with `epsilon=1e-12`)
        stay finite and are not reported. When the numerics cannot run for a model that computes in float16 (no
        sample batch it accepts, too many parameters, the float32 reference raised), an info finding says why.
        """,
    why="""
        float16 overflows at 65504. A large matmul, an exp, a square or a sum over a long axis that is finite in
        float32 becomes inf in float16, and inf turns into NaN at the next subtraction or normalisation; from
        there every layer, the loss and the gradients are NaN. Loss scaling cannot help with forward overflow.
        The first layer that breaks is the one to fix; everything after it is collateral.
        """,
    bad="""
        import keras
        from keras import ops

        keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = keras.Input((1024,))
        x = keras.layers.Rescaling(255.0)(inputs)   # pixel values 0..255
        energy = keras.layers.Lambda(lambda t: ops.sum(t * t, axis=-1, keepdims=True))(x)   # inf in float16
        model = keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(energy))
        """,
    good="""
        import keras
        from keras import ops

        keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = keras.Input((1024,))
        x = keras.layers.Rescaling(255.0)(inputs)   # pixel values 0..255
        energy = keras.layers.Lambda(lambda t: ops.sum(t * t, axis=-1, keepdims=True), dtype="float32")(x)
        model = keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(energy))
        """,
    fix="""
        No autofix: give the named layer `dtype="float32"`, compute the overflowing op in float32, or rescale its
        input (normalise before the sum, subtract the max before exp).
        """,
)

define_rule(
    "MP405",
    "precision-divergence",
    "warning",
    "T",
    False,
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
        import keras
        from keras import ops

        keras.mixed_precision.set_global_policy("mixed_float16")

        def variance(t):   # hand-written E[x^2] - E[x]^2: cancels catastrophically in float16
            return ops.mean(t * t, axis=-1) - ops.square(ops.mean(t, axis=-1))

        inputs = keras.Input((64,))
        x = keras.layers.Rescaling(1.0, offset=100.0)(inputs)   # readings around 100
        model = keras.Model(inputs, keras.layers.Lambda(variance)(x))
        """,
    good="""
        import keras
        from keras import ops

        keras.mixed_precision.set_global_policy("mixed_float16")

        def variance(t):   # hand-written E[x^2] - E[x]^2: cancels catastrophically in float16
            return ops.mean(t * t, axis=-1) - ops.square(ops.mean(t, axis=-1))

        inputs = keras.Input((64,))
        x = keras.layers.Rescaling(1.0, offset=100.0)(inputs)   # readings around 100
        model = keras.Model(inputs, keras.layers.Lambda(variance, dtype="float32")(x))   # computed in float32
        """,
    fix="""
        No autofix: set `dtype="float32"` on the named layer, or use a numerically stable formulation (built-in
        normalisation layers compute their statistics in float32).
        """,
)


def _where(ctx: TraceContext, node: GraphNode | None) -> SourceRef | None:
    """The layer's constructor line, or for a custom layer class defined in this file its class line (when the
    run did not name the line of the op that went non-finite)."""
    if node is None:
        return None
    cls = ctx.static.classes.get(node.class_name) if ctx.static is not None else None
    if node.kind == "custom" and cls is not None:
        return ctx.at_line(cls.lineno)
    return node.created_at


def _judged(row: NumericsRow) -> bool:
    """A layer is judged only against a float32 output that is finite and has elements: NaN from pooling over an
    empty tensor is the sample's fault, in both precisions."""
    return row.finite_reference and not row.empty_reference


def _node(graph: ModelGraph | None, node_id: str) -> GraphNode | None:
    return graph.node(node_id) if graph is not None else None


# ------------------------------------------------------------------------------------------------------- MP404


@trace_check("MP404")
def trace_non_finite(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    found = []
    for model, record in facts.numerics():
        first = next((row for row in record.layers if not row.finite and _judged(row)), None)
        if first is None:
            continue
        culprit = record.first_non_finite
        op = ""
        where = _where(ctx, _node(model.graph, first.id))
        if culprit is not None and culprit.id == first.id and culprit.line:
            where = ctx.at_line(culprit.line)  # the op's own line, inside the innermost layer that ran it
        if culprit is not None and culprit.id == first.id and culprit.op:
            op = f" (first non-finite op: `{culprit.op}`)"
        elif culprit is not None and culprit.id == first.id and culprit.inputs_finite is False:
            op = " (its input is already non-finite: it comes from an operation outside any layer)"
        later = sum(1 for row in record.layers[record.layers.index(first) + 1 :] if not row.finite)
        found.append(
            ctx.diagnostic(
                "MP404",
                where,
                f"layer `{first.id}` ({first.class_name}) of model `{model.name}` outputs inf/NaN under "
                f"{record.dtype}{op} while float32 with the same weights stays finite (max |x| "
                f"{_number(first.max_abs_reference)}) on a sample batch of {record.batch_size}; "
                f"{later} later layer{'s' if later != 1 else ''} inherit{'s' if later == 1 else ''} it. Compute this "
                f'layer in float32 (dtype="float32") or make its math float16-safe',
                layer=first.id,
            )
        )
    return found


# Reasons the numerics did not run that need no telling: nothing computes in float16, the user turned them off, or
# the model failed to build (the run's exception is the finding: one per root cause).
_NOTHING_TO_TELL = ("no layer computes in", "disabled", FAILED_BUILD)


@trace_check("MP404")
def trace_numerics_not_run(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    """A model computing in float16 whose numerics could not run: said once, as info, with the reason (otherwise
    MP404/MP405 stay silent for it and nobody knows why)."""
    found = []
    for model in facts.models:
        record = model.numerics
        if record is None or not record.skipped or record.skipped.startswith(_NOTHING_TO_TELL):
            continue
        if model.error is not None and verdict_of(model.error) is not None:
            continue  # the model raised for a reason a rule reports (MP201, MP406): one finding per root cause
        hint = ""
        if "sample batch" in record.skipped:
            hint = "; give it a batch it accepts with --sample FILE.npz (arrays named like its inputs)"
        finding = ctx.diagnostic(
            "MP404",
            _model_where(ctx, model),
            f"the float16 vs float32 numerics of model `{model.name}` did not run: {record.skipped}, so its layers "
            f"were not checked for inf/NaN (MP404) or divergence (MP405){hint}",
        )
        found.append(replace(finding, severity=Severity.INFO))
    return found


def _model_where(ctx: TraceContext, model) -> SourceRef | None:
    """Where the file binds a model found as a module attribute (`model = Classifier()`: a subclassed model's own
    creation frame is inside its `__init__`), else where the model was created."""
    if ctx.tree is None or model.how != f"module attribute `{model.name}`":
        return model.location
    lines = [
        statement.lineno
        for statement in ctx.tree.body
        if isinstance(statement, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == model.name for t in statement.targets)
    ]
    return ctx.at_line(lines[-1]) if lines else model.location  # the last binding is the value the module kept


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


# ------------------------------------------------------------------------------------------------------- MP405


@trace_check("MP405")
def trace_precision_divergence(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    found = []
    for model, record in facts.numerics():
        threshold = float(record.threshold or DEFAULT_THRESHOLD)
        # Below float16's smallest normal number it holds only subnormals: a layer whose float32 output never
        # reaches it is underflow territory, not a precision divergence (untrained networks get there).
        floor = FLOAT16_MIN_NORMAL
        if record.dtype == "bfloat16":
            threshold, floor = threshold * BFLOAT16_SCALE, 0.0  # float32's exponent range: no underflow zone
        rows = record.layers
        stop = next((i for i, row in enumerate(rows) if not row.finite and _judged(row)), len(rows))
        for index, row in enumerate(rows[:stop]):
            error = row.relative_error
            if error is None or error <= threshold or (row.max_abs_reference or 0.0) < floor or not _judged(row):
                continue
            before = _input_error(model.graph, rows, row.id)
            after = [r for r in rows[index + 1 : stop] if (r.relative_error or 0.0) > threshold]
            final = rows[stop - 1].relative_error if stop else None
            found.append(
                ctx.diagnostic(
                    "MP405",
                    _where(ctx, _node(model.graph, row.id)),
                    f"layer `{row.id}` ({row.class_name}) of model `{model.name}` differs from float32 by "
                    f"{error:.2%} of its range under {record.dtype} (inputs: {_percent(before)}; threshold "
                    f"{threshold:.2%}); {len(after)} later layer{'s' if len(after) != 1 else ''} stay above it, "
                    f'the last layer by {_percent(final)}. Keep this layer in float32 (dtype="float32") or use a '
                    f"numerically stable formulation",
                    layer=row.id,
                )
            )
            break
    return found


def _input_error(graph: ModelGraph | None, rows: list[NumericsRow], node_id: str) -> float | None:
    errors = {row.id: row.relative_error for row in rows}
    sources = [e.source for e in graph.edges if e.target == node_id] if graph is not None else []
    known = [errors[s] for s in sources if errors.get(s) is not None]
    return max(known) if known else (0.0 if sources or graph is None else None)


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"
