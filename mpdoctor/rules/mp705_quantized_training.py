"""MP705 quantized-model-trained: `fit` on a model quantized to int8/int4 without LoRA."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Diagnostic
from mpdoctor.facts.quantization import FROZEN_KERNEL_MODES
from mpdoctor.registry import define_rule, static_check
from mpdoctor.static.astutil import position
from mpdoctor.static.quantization import quantize_calls

if TYPE_CHECKING:
    from mpdoctor.static.context import StaticContext

define_rule(
    "MP705",
    "quantized-model-trained",
    "warning",
    "S",
    False,
    summary="A model quantized to int8/int4 is then trained without LoRA: its quantized kernels do not change.",
    what="""
        Keras 3 only. `model.quantize("int8")` (or int4, gptq, awq) and, after it, `model.fit(...)` /
        `train_on_batch` on the same model name, in a file that never calls `enable_lora`. `float8` is not
        reported: it is a training mode.
        """,
    why="""
        Measured on Keras 3.15.1 (TensorFlow backend): after `quantize("int8")` each `Dense` kernel is an int8
        variable with `trainable=False` plus a float32 `kernel_scale`, also not trainable; two epochs of `fit`
        changed only the biases and nothing failed. What trains a quantized model: `layer.enable_lora(rank)` on
        its quantized layers (before or after `quantize`, both measured) adds float32 `lora_kernel_a/b` that
        train; or train in float (or `quantize("float8")`, whose float32 kernels train) and quantize afterwards.
        """,
    bad="""
        import keras
        import numpy as np

        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(4)])
        model.quantize("int8")
        model.compile(optimizer="adam", loss="mse")
        model.fit(np.random.rand(64, 16), np.random.rand(64, 4), epochs=2, verbose=0)
        """,
    good="""
        import keras
        import numpy as np

        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(4)])
        model.quantize("int8")
        for layer in model.layers:
            layer.enable_lora(4)   # float32 adapters that train on top of the frozen int8 kernels
        model.compile(optimizer="adam", loss="mse")
        model.fit(np.random.rand(64, 16), np.random.rand(64, 4), epochs=2, verbose=0)
        """,
    fix="""
        None: whether to add LoRA adapters or train before quantizing is the author's choice.
        """,
)

_TRAIN_METHODS = ("fit", "fit_generator", "train_on_batch")


@static_check("MP705", requires=r"quantize")
def check_quantized_training(ctx: StaticContext) -> Iterable[Diagnostic]:
    calls = [c for c in quantize_calls(ctx) if c.mode in FROZEN_KERNEL_MODES and c.receiver_name is not None]
    if not calls or ctx.method_calls("enable_lora"):
        return
    training = ctx.method_calls(*_TRAIN_METHODS)
    for call in calls:
        bound = ctx.last_assignment(call.receiver_name or "", call.node)
        for train in training:
            receiver = getattr(train.func, "value", None)
            if (
                getattr(receiver, "id", None) == call.receiver_name
                and position(train) > position(call.node)
                and ctx.enclosing_function(train) is ctx.enclosing_function(call.node)
                and ctx.last_assignment(call.receiver_name or "", train) is bound
            ):
                method = getattr(train.func, "attr", "fit")
                yield ctx.diagnostic(
                    "MP705",
                    train,
                    f"`{call.receiver_name}` was quantized to {call.mode} at line {call.node.lineno}: its {call.mode} "
                    f"kernels are not trainable, so `{method}` only changes what is left in float (biases, "
                    f"unquantized layers); enable LoRA on the quantized layers (`layer.enable_lora(rank)`) or train "
                    f"before quantizing",
                )
                break
