"""MP203 exported-signature-float16: a model exported with float16 tensors in its serving signature."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Diagnostic
from mpdoctor.facts.dtypes import low_precision
from mpdoctor.registry import define_rule, trace_check
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts

define_rule(
    "MP203",
    "exported-signature-float16",
    "warning",
    "T",
    True,
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
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = keras.Input((128,))
        x = keras.layers.Dense(64, activation="relu")(inputs)
        outputs = keras.layers.Dense(10)(x)   # float16 output
        model = keras.Model(inputs, outputs)
        model.export("serving")   # serving signature: float16 output
        """,
    good="""
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = keras.Input((128,))
        x = keras.layers.Dense(64, activation="relu")(inputs)
        x = keras.layers.Dense(10)(x)
        outputs = keras.layers.Activation("linear", dtype="float32")(x)   # float32 output
        model = keras.Model(inputs, outputs)
        model.export("serving")
        """,
    fix="""
        Adds a float32 output layer (`Activation("linear", dtype="float32")`) before export, or an explicit
        float32 `input_signature` / `tf.TensorSpec(..., tf.float32)` for the exported function.
        """,
)


@trace_check("MP203")
def trace_exported_signature_float16(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    found = []
    for export in facts.exports:
        signatures = export.savedmodel.signatures if export.savedmodel else []
        low = sorted(
            {
                f"{kind} `{spec.name}` is {spec.dtype}"
                for signature in signatures
                for kind, specs in (("inputs", signature.inputs), ("outputs", signature.outputs))
                for spec in specs
                if low_precision(spec.dtype)
            }
        )
        if low:
            found.append(
                ctx.diagnostic(
                    "MP203",
                    export.location,
                    f"{export.api} wrote a serving signature with low-precision "
                    f"tensors ({'; '.join(low[:4])}): consumers that feed float32 or expect float32 break; make the "
                    f"output layer float32 and give the input an explicit float32 spec",
                )
            )
    return found
