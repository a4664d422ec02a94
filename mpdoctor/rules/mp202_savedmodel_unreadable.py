"""MP202 savedmodel-unreadable: a SavedModel handle that cannot be read (signature checks skipped)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Diagnostic
from mpdoctor.registry import define_rule, explains_exception, trace_check
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import ExceptionRecord, Facts

define_rule(
    "MP202",
    "savedmodel-unreadable",
    "warning",
    "TA",
    False,
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
        import os

        os.environ["TF_USE_LEGACY_KERAS"] = "1"   # hub.KerasLayer needs tf_keras
        import tensorflow as tf
        import tensorflow_hub as hub

        model = tf.keras.Sequential([
            tf.keras.layers.InputLayer(input_shape=(8,)),
            hub.KerasLayer("models/features"),   # directory does not exist here
            tf.keras.layers.Dense(2),
        ])
        """,
    good="""
        import os

        os.environ["TF_USE_LEGACY_KERAS"] = "1"   # hub.KerasLayer needs tf_keras
        import tensorflow as tf
        import tensorflow_hub as hub

        class Features(tf.Module):   # stands for the model: download it once, or set TFHUB_CACHE_DIR
            @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32)])
            def __call__(self, x):
                return tf.nn.relu(x)

        tf.saved_model.save(Features(), "models/features")   # make the SavedModel available locally
        model = tf.keras.Sequential([
            tf.keras.layers.InputLayer(input_shape=(8,)),
            hub.KerasLayer("models/features"),
            tf.keras.layers.Dense(2),
        ])
        """,
    fix="No autofix: make the SavedModel available (path, cache or network) and run mpdoctor again.",
)


@trace_check("MP202")
def trace_savedmodel_unreadable(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    found = []
    for load in facts.savedmodel_loads:
        error = load.savedmodel.error if load.savedmodel else None
        if error:
            found.append(
                ctx.diagnostic(
                    "MP202",
                    load.location,
                    f"cannot read the SavedModel behind {load.api} "
                    f"({load.handle}): {error.message}; its signature checks were skipped",
                )
            )
    return found


@explains_exception("MP202")
def failed_load(exception: ExceptionRecord, facts: Facts, found: list[Diagnostic]) -> bool:
    """A SavedModel load that raised (a missing path, no network) is the run's exception when MP202 reports it."""
    failed = [load for load in facts.savedmodel_loads if load.error and load.savedmodel and load.savedmodel.error]
    return bool(failed) and any(d.code == "MP202" for d in found)
