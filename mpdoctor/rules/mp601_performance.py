"""MP6xx: performance hints (info). MP601 has a static check; MP602 and MP603 are trace-only (documented here)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic
from mpdoctor.facts.dtypes import compute_dtype, is_float16_compute
from mpdoctor.facts.hardware import slow_hardware
from mpdoctor.facts.keras_semantics import PASS_THROUGH_LAYERS, SIZE_ARGUMENTS
from mpdoctor.facts.records import LayerRecord
from mpdoctor.registry import define_rule, static_check, trace_check
from mpdoctor.static.astutil import binds
from mpdoctor.static.context import StaticContext, policy_confidence
from mpdoctor.static.policies import policy_from_expr
from mpdoctor.static.topology import layer_inputs, model_output_layers
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts

define_rule(
    "MP601",
    "tensor-core-alignment",
    "info",
    "ST",
    False,
    summary="Under float16 compute: Dense units, Conv filters, Embedding sizes or batch size not a multiple of 8.",
    what="""
        Under a float16/bfloat16 compute policy, reports integer sizes written as literals that are not multiples
        of 8: `Dense(units)`, `Conv1D/2D/3D`, `Conv*Transpose` and `SeparableConv*` `filters`, `Embedding`
        `input_dim` (vocabulary) and `output_dim`, and `model.fit(..., batch_size=N)`. A literal may sit in the
        call or in a module constant the call names (`HIDDEN = 100`). The message gives the next multiple of 8.

        Deliberately not reported: model output layers and the layer feeding a weight-free output layer (the
        logits `Dense(10)` before `Activation("softmax", dtype="float32")`: their size is the number of classes or
        targets, fixed by the task), layers with `dtype="float32"`, sizes below 8, sizes computed at run time,
        and layers built while no float16 policy is in force. Other dimensions (sequence length, input channels,
        feature dimensions of the data) are not visible to the static pass.
        """,
    why="""
        NVIDIA Tensor Cores run float16/bfloat16 matrix multiplies and convolutions fastest when the dimensions
        involved are multiples of 8 (cuBLAS/cuDNN pad or fall back to slower kernels otherwise); NVIDIA's
        performance guide and the TensorFlow mixed precision guide both recommend it. A Dense layer of 500 units
        or a batch of 100 leaves part of the speed-up of mixed precision unused. This is a hint, not a bug: the
        model is correct either way, and on CPUs it makes no difference.
        """,
    bad="""
        import keras
        import numpy as np

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.Input((784,)),
            keras.layers.Dense(500, activation="relu"),    # 500 is not a multiple of 8
            keras.layers.Dense(10),
            keras.layers.Activation("softmax", dtype="float32"),
        ])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")

        if __name__ == "__main__":
            x, y = np.random.rand(1000, 784).astype("float32"), np.random.randint(0, 10, 1000)
            model.fit(x, y, batch_size=100)                # neither is 100
        """,
    good="""
        import keras
        import numpy as np

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.Input((784,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(10),
            keras.layers.Activation("softmax", dtype="float32"),
        ])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")

        if __name__ == "__main__":
            x, y = np.random.rand(1000, 784).astype("float32"), np.random.randint(0, 10, 1000)
            model.fit(x, y, batch_size=128)
        """,
    fix="""
        No autofix: changing a layer size changes the model (and its checkpoints). Round the size up to the
        suggested multiple of 8 when you are free to choose it.
        """,
)

define_rule(
    "MP602",
    "float64-input",
    "info",
    "T",
    False,
    summary="Model inputs or datasets yield float64 (the numpy default): an extra cast every step.",
    what="""
        The trace pass sees float64 tensors arriving at a model input or yielded by a `tf.data.Dataset`
        (typically numpy arrays created with `np.random.rand`, `np.array([...1.0...])` or pandas `.values`).
        """,
    why="""
        Keras casts float64 inputs to the first layer's compute dtype on every step, on the device, after copying
        twice the bytes of float32 (four times float16) from host memory. Converting once when the data is loaded
        is free; converting every step is not.
        """,
    bad="""
        import keras
        import numpy as np

        x = np.random.rand(1000, 32)   # float64, the numpy default
        y = np.random.randint(0, 10, 1000)
        inputs = keras.Input((32,), dtype=x.dtype)   # a float64 model input: every step casts it
        model = keras.Model(inputs, keras.layers.Dense(10)(inputs))
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

        if __name__ == "__main__":
            model.fit(x, y, batch_size=256)
        """,
    good="""
        import keras
        import numpy as np

        x = np.random.rand(1000, 32).astype("float32")   # cast once, where the data is made
        y = np.random.randint(0, 10, 1000)
        inputs = keras.Input((32,), dtype=x.dtype)
        model = keras.Model(inputs, keras.layers.Dense(10)(inputs))
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

        if __name__ == "__main__":
            model.fit(x, y, batch_size=256)
        """,
    fix='No autofix: cast the data once where it is loaded (`.astype("float32")`, `tf.data` `map(tf.cast)`).',
)

define_rule(
    "MP603",
    "no-fast-float16-hardware",
    "info",
    "T",
    False,
    opt_in=True,
    summary="A float16/bfloat16 policy on a machine without hardware that runs it fast.",
    what="""
        The trace pass finds float16 compute (a `mixed_float16` / `float16` policy, globally or only in a layer's
        `dtype=` argument) while no GPU of compute capability 7.0 or higher is visible (or bfloat16 compute without
        bfloat16 support: no TPU, no GPU of compute capability 8.0 or higher, no CPU with AVX512-BF16/AMX). Never an
        error: the model may be trained on other hardware.

        Opt-in: not in the default selection, because every CPU machine (CI runners, most laptops) would report
        it on correct code. Select it by its code (`--extend-select MP603`, or `extend-select = ["MP603"]`); a
        prefix such as `MP6` does not select it. The HTML report's environment table shows the same fact either
        way.
        """,
    why="""
        On hardware without fast float16 math, mixed precision gives no speed-up and usually runs slower (extra
        casts, float16 emulated through float32), while still carrying the numerical risks float16 brings. TF
        itself warns "The dtype policy mixed_float16 may run slowly because this machine does not have a GPU".
        """,
    bad="""
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")   # slower than float32 without a Tensor Core GPU
        model = keras.Sequential([
            keras.Input((784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10),
            keras.layers.Activation("softmax", dtype="float32"),
        ])
        """,
    good="""
        import keras
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if gpus and tf.config.experimental.get_device_details(gpus[0]).get("compute_capability", (0, 0)) >= (7, 0):
            keras.mixed_precision.set_global_policy("mixed_float16")   # only where float16 is fast
        model = keras.Sequential([
            keras.Input((784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10),
            keras.layers.Activation("softmax", dtype="float32"),
        ])
        """,
    fix="No autofix: enable the policy only where the hardware supports it.",
)


_MODEL_FIT = "fit"
ALIGNMENT = 8


def _next_multiple(value: int) -> int:
    return -(-value // ALIGNMENT) * ALIGNMENT


def _int_literal(ctx: StaticContext, expr: ast.AST | None) -> ast.Constant | None:
    """The integer literal `expr` is, or the one a module constant it names was assigned (`UNITS = 100`), as long
    as no enclosing function rebinds the name."""
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return expr
    if isinstance(expr, ast.Name) and expr.id in ctx.module_constants:
        function = ctx.enclosing_function(expr)
        while function is not None:
            if binds(function, expr.id):
                return None
            function = ctx.enclosing_function(function)
        value = ctx.module_constants[expr.id]
        if isinstance(value, ast.Constant) and type(value.value) is int:
            return value
    return None


def _argument(call: ast.Call, position: int, keyword: str) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if len(call.args) > position and not any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
        return call.args[position]
    return None


@static_check("MP601")
def check_tensor_core_alignment(ctx: StaticContext) -> Iterable[Diagnostic]:
    if not ctx.any_float16_policy:
        return
    yield from _layer_sizes(ctx, _output_sized(ctx))
    yield from _batch_sizes(ctx)


def _output_sized(ctx: StaticContext) -> set[ast.AST]:
    """Constructor calls of layers whose size the task fixes: model output layers and, behind a weight-free output
    layer (`Dense(10)` then `Activation("softmax", dtype="float32")`), the layer feeding it."""
    result: set[ast.AST] = set()
    pending = [out.layer for out in model_output_layers(ctx) if isinstance(out.layer, LayerRecord)]
    while pending:
        layer = pending.pop()
        if layer.node in result:
            continue
        result.add(layer.node)
        if not layer.custom and layer.kind in PASS_THROUGH_LAYERS:
            pending += layer_inputs(ctx, layer)
    return result


def _layer_sizes(ctx: StaticContext, outputs: set[ast.AST]) -> Iterator[Diagnostic]:
    for layer in ctx.layer_calls:
        if layer.custom or layer.kind not in SIZE_ARGUMENTS or layer.node in outputs:
            continue
        policies = ctx.layer_policies(layer)
        policy = ctx.float16_policy(policies)
        if policy is None:
            continue
        for position, keyword in SIZE_ARGUMENTS[layer.kind]:
            literal = _int_literal(ctx, _argument(layer.node, position, keyword))
            if literal is None or literal.value < ALIGNMENT or literal.value % ALIGNMENT == 0:
                continue
            yield ctx.diagnostic(
                "MP601",
                literal,
                f"{layer.kind} {keyword}={literal.value} is not a multiple of {ALIGNMENT}: under {policy} Tensor "
                f"Cores run fastest with multiples of {ALIGNMENT} (e.g. {_next_multiple(literal.value)})",
                confidence=policy_confidence(policies),
            )


def _batch_sizes(ctx: StaticContext) -> Iterator[Diagnostic]:
    for call in ctx.method_calls(_MODEL_FIT):
        batch = next((k.value for k in call.keywords if k.arg == "batch_size"), None)
        literal = _int_literal(ctx, batch)
        if literal is None or literal.value < ALIGNMENT or literal.value % ALIGNMENT == 0:
            continue
        policies = ctx.policies_at(call)
        policy = ctx.float16_policy(policies) or _explicit_layer_float16(ctx)
        if policy is None:
            continue
        yield ctx.diagnostic(
            "MP601",
            literal,
            f"batch_size={literal.value} is not a multiple of {ALIGNMENT}: under {policy} Tensor Cores run fastest "
            f"with multiples of {ALIGNMENT} (e.g. {_next_multiple(literal.value)})",
            confidence=policy_confidence(policies) if ctx.float16_policy(policies) else Confidence.MEDIUM,
        )


def _explicit_layer_float16(ctx: StaticContext) -> str | None:
    """A float16 policy some layer of the file is given explicitly (`dtype="mixed_float16"`)."""
    for layer in ctx.layer_calls:
        for kw in layer.node.keywords:
            if kw.arg == "dtype":
                policy = policy_from_expr(kw.value, ctx.imports, ctx.module_constants)
                if is_float16_compute(policy):
                    return policy
    return None


# ---------------------------------------------------------------- trace forms


@trace_check("MP603")
def trace_no_fast_float16_hardware(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    """Float16 compute on a machine whose devices do not compute it fast: from the first float16 global policy the
    run set, else the first layer given a float16 `dtype=`, else a float16 global policy in force from the start
    (--assume-policy). Info only: the model may train elsewhere."""
    event = next((e for e in facts.policy_events if is_float16_compute(e.policy)), None)
    if event is not None:
        policy, where, subject = event.policy, event.location, f'policy "{event.policy}"'
    else:
        layer = next((r for r in facts.layers.values() if is_float16_compute(r.explicit_dtype) and r.created_at), None)
        if layer is not None:
            policy, where = layer.explicit_dtype, layer.created_at
            subject = f'{layer.class_name} `{layer.name}` with dtype="{layer.explicit_dtype}"'
        elif is_float16_compute(facts.final_policy):  # in force from the start (--assume-policy, an entry point)
            policy, where, subject = facts.final_policy, None, f'global policy "{facts.final_policy}"'
        else:
            return []
    reason = slow_hardware(facts.environment, compute_dtype(policy))
    if reason is None:
        return []
    return [ctx.diagnostic("MP603", where, f"{subject} on a machine with {reason}; fine if the model trains elsewhere")]


@trace_check("MP602")
def trace_float64_input(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    """Model inputs declared float64: every step casts them (numpy arrays default to float64, and
    `keras.Input(dtype="float64")` / `tf.constant` of Python floats in float64 follow)."""
    found = []
    for model, graph in facts.graphs():
        for spec in graph.inputs:
            if spec.dtype == "float64":
                node = graph.node(spec.node)
                found.append(
                    ctx.diagnostic(
                        "MP602",
                        (node.created_at if node else None) or model.location,
                        f"input `{spec.node}` of model `{model.name}` is float64: each step casts it to the "
                        f"compute dtype; feed float32 (e.g. x.astype('float32')) and declare the input float32",
                        layer=spec.node,
                    )
                )
    return found
