"""MP503 float16-loss: the compiled loss computes in float16."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Diagnostic
from mpdoctor.facts.loss_outputs import float16_loss_outputs
from mpdoctor.registry import define_rule, trace_check
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts

define_rule(
    "MP503",
    "float16-loss",
    "warning",
    "T",
    True,
    summary="The loss is computed from float16 outputs / float16 labels.",
    what="""
        Trace pass only: the model is compiled with a loss, and that loss, evaluated (`model.compute_loss`) on the
        model's float16 predictions from the numerics sample batch, computes in float16. Measured: tf_keras
        losses compute in the dtype of the predictions (and cast the labels to it); Keras 3 losses cast the
        predictions to their own dtype (float32 unless the loss was given `dtype="float16"`), so under Keras 3
        a float16 output is MP402, not MP503.

        One finding per cause: for an output reported here MP402 is not raised; a float16 softmax/sigmoid head
        stays MP401 (its fix, `dtype="float32"` on that layer, also fixes the loss) and is not reported here. The
        finding sits at `model.compile(...)`; the fix edits the output layer. The static pass does not raise it.
        """,
    why="""
        Losses reduce over a batch: sums overflow float16 (max 65504), logs and exps of float16 probabilities
        lose most of their precision, and cross-entropy of a float16 softmax gives inf/NaN on confident
        predictions. Keras computes the loss in the dtype it receives.
        """,
    bad="""
        import os

        os.environ["TF_USE_LEGACY_KERAS"] = "1"   # tf_keras losses compute in the dtype of the predictions
        import tensorflow as tf

        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = tf.keras.Input((20,))
        x = tf.keras.layers.Dense(64, activation="relu")(inputs)
        outputs = tf.keras.layers.Dense(10)(x)   # float16 logits
        model = tf.keras.Model(inputs, outputs)
        model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        """,
    good="""
        import os

        os.environ["TF_USE_LEGACY_KERAS"] = "1"   # tf_keras losses compute in the dtype of the predictions
        import tensorflow as tf

        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = tf.keras.Input((20,))
        x = tf.keras.layers.Dense(64, activation="relu")(inputs)
        x = tf.keras.layers.Dense(10)(x)
        outputs = tf.keras.layers.Activation("linear", dtype="float32")(x)   # the loss sees float32
        model = tf.keras.Model(inputs, outputs)
        model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        """,
    fix="""
        Adds `Activation("linear", dtype="float32")` on the model output, or casts the labels to float32 in the
        input pipeline.
        """,
)


@trace_check("MP503")
def trace_float16_loss(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    """The compiled loss, fed the model's float16 predictions, computes in float16 (tf_keras losses compute in the
    predictions' dtype; Keras 3 losses cast them to their own dtype, float32 unless set otherwise). Not raised when
    MP401 already reports the output (a float16 softmax head: its fix, dtype="float32" on that layer, fixes the
    loss too); MP402 is not raised for an output that this rule reports."""
    found = []
    for model, _, loss, output in float16_loss_outputs(facts):
        compile_line = _compile_line(ctx, model.name)
        where = ctx.at_line(compile_line) if compile_line else output.created_at
        found.append(
            ctx.diagnostic(
                "MP503",
                where,
                f"the compiled loss `{loss.name}` of model `{model.name}` computes in {loss.dtype}: it "
                f"receives the {'/'.join(dict.fromkeys(loss.predictions))} output `{output.id}` "
                f"({_consequence(loss.dtype)}); end the model with "
                f'Activation("linear", dtype="float32") or give `{output.id}` dtype="float32"',
                layer=output.id,
                fix=ctx.float32_fix(output.created_at, (output.class_name,), 'set dtype="float32" on the output layer'),
            )
        )
    return found


def _consequence(dtype: str | None) -> str:
    if dtype == "bfloat16":  # float32's range: nothing overflows, but an 8-bit mantissa
        return "the loss and its sums keep only ~3 significant digits"
    return "sums overflow at 65504, logs of small probabilities lose their precision"


def _compile_line(ctx: TraceContext, model_name: str | None) -> int | None:
    """The line of `<model>.compile(...)` for the model's variable name, else of the file's first `.compile(`."""
    if ctx.static is None:
        return None
    calls = [c for c in ctx.static.calls if isinstance(c.func, ast.Attribute) and c.func.attr == "compile"]
    named = [c for c in calls if isinstance(c.func.value, ast.Name) and c.func.value.id == model_name]
    return (named or calls)[0].lineno if calls else None
