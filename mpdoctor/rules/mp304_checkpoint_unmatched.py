"""MP304 checkpoint-unmatched: variables without a checkpoint value, checkpoint values without a variable."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Diagnostic
from mpdoctor.registry import define_rule, trace_check
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts

define_rule(
    "MP304",
    "checkpoint-unmatched",
    "info",
    "TA",
    False,
    summary="Variables with no checkpoint value, or checkpoint values matching no variable, in a traced restore.",
    what="""
        Trace pass: for each restore the run makes (TF2 `tf.train.Checkpoint.restore/read`, tf_keras
        `load_weights` of TF-format weights, TF1 `Saver.restore`, and hand-written restores: values read with
        `tf.train.load_checkpoint(...).get_tensor`, `np.load` or h5py and assigned into the model's variables
        with `assign` / `set_weights`), checked after the model's first call, one
        finding lists the model variables that received no value and the checkpoint values that matched no
        object or variable; unused values alone are not reported once `expect_partial()` declared the restore
        partial. `check --checkpoint PATH` reads an object-based checkpoint into each model (as its root and as
        `model=`) and reports the better match the same way. Never raised by the static pass.
        """,
    why="""
        Converting or rebuilding a model for float16 (a different layer structure, a wrapped optimizer, renamed
        scopes) easily changes checkpoint keys; the unmatched variables then keep their random initial values.
        """,
    bad="""
        import keras
        import tensorflow as tf

        def build_model():
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

        tf.train.Checkpoint(model=build_model()).write("pretrained/ckpt")   # saved as model=...

        model = build_model()
        tf.train.Checkpoint(net=model).read("pretrained/ckpt").expect_partial()   # nothing restored, no error
        """,
    good="""
        import keras
        import tensorflow as tf

        def build_model():
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

        tf.train.Checkpoint(model=build_model()).write("pretrained/ckpt")   # saved as model=...

        model = build_model()
        tf.train.Checkpoint(model=model).read("pretrained/ckpt").assert_existing_objects_matched()
        """,
    fix="No autofix: align the checkpoint keys (object names, scopes) with the model.",
)


# Per kind of restore: TF2 object-based, TF1 Saver (by name), hand-written (values the script read and assigned).
_NO_MATCH = {
    "object": "matched no object",
    "name": "matched no variable of the Saver",
    "values": "went into no variable",
}
_HINTS = {
    "object": "align the names: the checkpoint's object path (attribute names given to tf.train.Checkpoint, layer "
    "structure) must match the model's",
    "name": "align the variable names (scopes) with the checkpoint's keys, or pass var_list",
    "values": "the script reads values from the file and assigns them itself: check the keys it reads against the "
    "model's variables",
}


@trace_check("MP304")
def trace_checkpoint_unmatched(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    """One finding per traced restore that left model variables without a value, or checkpoint values unused unless
    the user declared the restore partial (`expect_partial()`)."""
    found = []
    for restore in facts.restores:
        unmatched = restore.unmatched
        if unmatched is None:
            continue
        missing, unused = unmatched.variables_without_value, unmatched.unused_values
        if not missing and not (unused and not unmatched.expect_partial):
            continue
        parts = []
        if missing:
            keeps = "keep their initial values" if missing > 1 else "keeps its initial value"
            parts.append(
                f"{missing} variable{'s' if missing > 1 else ''} got no value and {keeps} "
                f"({_some(unmatched.variable_names, missing)})"
            )
        if unused:
            parts.append(
                f"{unused} checkpoint value{'s' if unused > 1 else ''} "
                f"{_NO_MATCH.get(unmatched.kind, 'matched no variable')} "
                f"({_some(unmatched.unused_value_names, unused)})"
            )
        hint = _HINTS.get(unmatched.kind, _HINTS["name"])
        found.append(
            ctx.diagnostic(
                "MP304", restore.location or restore.anchor, f"{restore.call_text}: {'; '.join(parts)}; {hint}"
            )
        )
    return found


def _some(names: list[str], total: int, shown: int = 4) -> str:
    listed = ", ".join(names[:shown])
    return listed + (f" and {total - shown} more" if total > shown else "")
