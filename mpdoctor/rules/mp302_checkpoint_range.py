"""MP302 checkpoint-float16-overflow and MP303 checkpoint-float16-underflow: range audits of restored checkpoints."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Diagnostic
from mpdoctor.registry import define_rule, trace_check
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts

define_rule(
    "MP302",
    "checkpoint-float16-overflow",
    "error",
    "TA",
    False,
    summary="Checkpoint float32 values that become inf in float16 (|x| > 65504).",
    what="""
        Artifact and trace passes: for each float32 checkpoint variable that will live or be computed in float16
        (a float16 restore target, a `convert-checkpoint --dtype float16`, a layer computing in float16), counts
        the values with |x| > 65504 and reports the count and the largest |x|. Source alone cannot see values, so
        the static pass never raises it. The trace judges each value by the layer that uses it: a value restored
        into a layer that computes in float32 (`Dense(1, dtype="float32")` under `mixed_float16`) is not
        reported, and a run in which no layer computes in float16 is not audited. Hand-written restores (values
        read with `tf.train.load_checkpoint`, `np.load` or h5py and assigned into variables) are audited on the
        values assigned.
        """,
    why="""
        65504 is float16's largest finite value: larger weights become inf when cast, and the first matmul
        through them turns activations into inf/NaN. Silent casts (tf_keras `.h5`, Keras 3 `.weights.h5`) do
        this without any error.
        """,
    bad="""
        import keras
        import numpy as np

        def build_model(dtype=None):
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, dtype=dtype)])

        keras.mixed_precision.set_global_policy("mixed_float16")
        pretrained = build_model(dtype="float32")   # stands for float32 weights trained elsewhere
        pretrained.layers[0].kernel.assign(np.full((4, 2), 1e5))   # beyond float16's 65504
        pretrained.save_weights("pretrained.weights.h5")

        model = build_model()   # computes in float16: 1e5 becomes inf
        model.load_weights("pretrained.weights.h5")
        """,
    good="""
        import keras
        import numpy as np

        def build_model(dtype=None):
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, dtype=dtype)])

        keras.mixed_precision.set_global_policy("mixed_bfloat16")   # float32's range: 1e5 stays finite
        pretrained = build_model(dtype="float32")   # stands for float32 weights trained elsewhere
        pretrained.layers[0].kernel.assign(np.full((4, 2), 1e5))   # beyond float16's 65504
        pretrained.save_weights("pretrained.weights.h5")

        model = build_model()
        model.load_weights("pretrained.weights.h5")
        """,
    fix="No autofix: rescale the weights, keep the variable in float32, or use bfloat16.",
)

define_rule(
    "MP303",
    "checkpoint-float16-underflow",
    "warning",
    "TA",
    False,
    summary="Nonzero checkpoint values that flush to zero or go subnormal in float16.",
    what="""
        Artifact and trace passes: per float32 checkpoint variable headed for float16, the count and fraction of
        nonzero values below 5.96e-8 (flushed to zero) and below 6.10e-5 (subnormal, reduced precision); warns
        above a configurable fraction. For bfloat16 targets it reports the precision loss instead (bfloat16
        keeps float32's range but only 8 bits of mantissa). Never raised by the static pass. Like MP302, the trace
        judges each value by the layer that uses it.
        """,
    why="""
        Small weights (layer-norm-free deep nets, tiny learning-rate-scaled parameters, optimizer slots) vanish
        or lose precision in float16 and the restored model no longer reproduces the float32 one.
        """,
    bad="""
        import keras
        import numpy as np

        def build_model(dtype=None):
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, dtype=dtype)])

        keras.mixed_precision.set_global_policy("float16")
        pretrained = build_model(dtype="float32")   # stands for float32 weights trained elsewhere
        pretrained.layers[0].kernel.assign(np.full((4, 2), 1e-6))   # below float16's smallest normal, 6.1e-5
        pretrained.save_weights("pretrained.weights.h5")

        model = build_model()   # float16 variables: 1e-6 becomes subnormal, below 6e-8 would be 0
        model.load_weights("pretrained.weights.h5")
        """,
    good="""
        import keras
        import numpy as np

        def build_model(dtype=None):
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, dtype=dtype)])

        keras.mixed_precision.set_global_policy("mixed_bfloat16")   # float32's range, float32 variables
        pretrained = build_model(dtype="float32")   # stands for float32 weights trained elsewhere
        pretrained.layers[0].kernel.assign(np.full((4, 2), 1e-6))   # below float16's smallest normal, 6.1e-5
        pretrained.save_weights("pretrained.weights.h5")

        model = build_model()
        model.load_weights("pretrained.weights.h5")
        """,
    fix="No autofix: keep those variables in float32 (mixed precision) or use bfloat16.",
)


_MAX_PER_CHECKPOINT = 20


def _audited_variables(facts: Facts, status: str):
    """(restore, audit, variable rows) of every audited checkpoint whose variables have the given audit status."""
    for restore in facts.restores:
        if restore.audit is None:
            continue
        # A value is judged where it is used: the bias of a float32 head holding 1e5 stays a finite 1e5.
        rows = [v for v in restore.audit.variables if v.status == status and v.used_in_low_precision]
        if rows:
            yield restore, restore.audit, rows


def _per_variable(facts: Facts, ctx: TraceContext, code: str, status: str, describe) -> list[Diagnostic]:
    """One finding per audited variable with `status`, at most _MAX_PER_CHECKPOINT per checkpoint, then one that
    counts the rest (nothing is dropped silently)."""
    found = []
    for restore, audit, rows in _audited_variables(facts, status):
        where = restore.anchor
        for row in rows[:_MAX_PER_CHECKPOINT]:
            found.append(
                ctx.diagnostic(code, where, f"{row.key} in {restore.path}: {describe(row, audit)}", layer=row.key)
            )
        if len(rows) > _MAX_PER_CHECKPOINT:
            found.append(
                ctx.diagnostic(
                    code,
                    where,
                    f"{len(rows) - _MAX_PER_CHECKPOINT} more variables of "
                    f"{restore.path} are {status} for {audit.target_dtype} (mpdoctor "
                    f"inspect {restore.path} --dtype {audit.target_dtype} lists them all)",
                    layer="(more)",
                )
            )
    return found


def _user(row, unknown: str, before: str = "", after: str = "") -> str:
    """How messages name the layer that uses a value: "layer `dense`", or `unknown`."""
    return f"{before}layer `{row.layer}`{after}" if row.layer else unknown


@trace_check("MP302")
def trace_checkpoint_float16_overflow(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    return _per_variable(
        facts,
        ctx,
        "MP302",
        "overflow",
        lambda row, audit: (
            f"{row.overflow} of {row.values} values exceed 65504 (max |x| = {row.max_abs:.4g}) and become inf "
            f"when {_user(row, 'this model')} computes in {audit.target_dtype}; rescale the weights or keep that "
            f"layer in float32"
        ),
    )


@trace_check("MP303")
def trace_checkpoint_float16_underflow(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    return _per_variable(
        facts,
        ctx,
        "MP303",
        "underflow",
        lambda row, audit: (
            f"{row.flushed} nonzero values flush to zero and {row.subnormal} become subnormal in "
            f"{audit.target_dtype}{_user(row, '', ' (used by ', ')')} "
            f"({row.flushed_fraction + row.subnormal_fraction:.1%} of {row.values}, "
            f"above the {audit.underflow_threshold:.0%} threshold)"
        ),
    )
