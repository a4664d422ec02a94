"""The training-loop analysis MP501/MP502 word and MP504 reuses (mpdoctor.static.training_loop, loss_scaling). No
TensorFlow import."""

from __future__ import annotations

import ast
import textwrap

from mpdoctor.config import Config
from mpdoctor.engine import check_source
from mpdoctor.static.context import StaticContext
from mpdoctor.static.loss_scaling import ADDS_LOSS_SCALING, Problem, judge_loop, loss_scaling_fix
from mpdoctor.static.semantic import Settings
from mpdoctor.static.training_loop import training_loops

LOOP = """
    import tensorflow as tf
    import keras

    keras.mixed_precision.set_global_policy("{policy}")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.Adam()

    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean((model(x) - y) ** 2)
{scale}        grads = tape.gradient({target}, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""


def source(policy="mixed_float16", scale="", target="loss"):
    return textwrap.dedent(LOOP.format(policy=policy, scale=scale, target=target))


def context(text: str) -> StaticContext:
    return StaticContext("t.py", "t.py", text, ast.parse(text), Settings(keras_version=3))


def test_a_loop_is_the_gradient_call_its_apply_and_its_tape_block():
    ctx = context(source())
    (loop,) = training_loops(ctx)
    assert (loop.tape, loop.gradient.lineno, loop.apply.lineno) == ("tape", 12, 13)
    assert loop.with_node is not None and loop.with_node.lineno == 10
    assert ast.unparse(loop.target) == "loss" and ast.unparse(loop.optimizer) == "optimizer"


def test_a_loop_without_scaling_under_mixed_float16_has_the_rewrite_mp501_offers():
    text = source()
    ctx = context(text)
    (loop,) = training_loops(ctx)
    finding = judge_loop(ctx, loop)
    assert finding is not None and finding.problem is Problem.NO_LOSS_SCALING
    assert finding.problem in ADDS_LOSS_SCALING
    config = Config()
    config.keras_version = 3
    diagnostics, _ = check_source(text, "t.py", config)
    (mp501,) = [d for d in diagnostics if d.code == "MP501"]
    assert loss_scaling_fix(ctx) == finding.fix.fix == mp501.fix


def test_a_loop_is_judged_only_when_something_is_wrong():
    ctx = context(source("mixed_bfloat16"))  # bfloat16 has float32's range: no loss scaling needed
    assert judge_loop(ctx, training_loops(ctx)[0]) is None
    ctx = context(source(scale="        scaled = optimizer.scale_loss(loss)\n", target="loss"))
    finding = judge_loop(ctx, training_loops(ctx)[0])
    assert finding is not None and finding.problem is Problem.DIFFERENTIATES_UNSCALED
    assert finding.scaled_name == "scaled" and loss_scaling_fix(ctx) is None


ACCUMULATING = """
    import tensorflow as tf
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.1)
    slots = [tf.Variable(tf.zeros_like(v)) for v in model.trainable_variables]
    buffer = []

    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean((model(x) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
{accumulate}
        optimizer.apply_gradients(zip({applied}, model.trainable_variables))
"""


def test_gradients_reach_apply_through_the_variables_or_lists_they_are_accumulated_into():
    """Issue 30: gradient accumulation in the step's own function is a training loop (MP501 judges it)."""
    ways = {
        "        for slot, g in zip(slots, grads):\n            slot.assign_add(g)": "slots",
        "        for i in range(len(grads)):\n            slots[i].assign_add(grads[i])": "slots",
        "        buffer.append(grads)": "buffer[0]",
    }
    for accumulate, applied in ways.items():
        ctx = context(textwrap.dedent(ACCUMULATING.format(accumulate=accumulate, applied=applied)))
        (loop,) = training_loops(ctx)
        assert ast.unparse(loop.apply).startswith("optimizer.apply_gradients"), accumulate
        assert judge_loop(ctx, loop).problem is Problem.NO_LOSS_SCALING
    # Variables that never took the gradients are not a loop's.
    unrelated = "        for slot in slots:\n            slot.assign_add(tf.ones_like(slot))"
    assert training_loops(context(textwrap.dedent(ACCUMULATING.format(accumulate=unrelated, applied="slots")))) == []
