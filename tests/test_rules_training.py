"""MP501 / MP502 edge cases, messages and fixes (static pass only, no TensorFlow import)."""

import ast
import subprocess
import sys
import textwrap

import pytest

from mpdoctor.config import Config
from mpdoctor.engine import check_source
from mpdoctor.fix.apply import apply_edits


def run(source, keras_version=None, assume_policy=None, codes=("MP501", "MP502")):
    config = Config()
    config.keras_version = keras_version
    config.assume_policy = assume_policy
    diagnostics, error = check_source(textwrap.dedent(source), "t.py", config)
    assert error is None, error.render()
    return [d for d in diagnostics if d.code in codes]


def apply_fix(source, diagnostic):
    fixed = apply_edits(textwrap.dedent(source), diagnostic.fix.edits)
    ast.parse(fixed)
    return fixed


K3_LOOP = """
    import tensorflow as tf
    import keras

    keras.mixed_precision.set_global_policy("{policy}")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.Adam()

    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean((model(x) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""

K2_LOOP = """
    import tensorflow as tf
    import tf_keras as keras

    keras.mixed_precision.set_global_policy("{policy}")
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(4,))])
    opt = keras.optimizers.Adam()

    def train_step(x, y):
        with tf.GradientTape(persistent=True) as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
"""


@pytest.mark.parametrize(
    "policy,expected", [("mixed_float16", 1), ("float16", 1), ("mixed_bfloat16", 0), ("bfloat16", 0), ("float32", 0)]
)
def test_mp501_policies(policy, expected):
    assert len(run(K3_LOOP.format(policy=policy))) == expected
    assert len(run(K2_LOOP.format(policy=policy))) == expected


def test_mp501_message_location_and_keras3_fix_is_idempotent():
    source = K3_LOOP.format(policy="mixed_float16")
    [d] = run(source)
    assert d.code == "MP501" and d.location.line == 12 and d.location.column == 13
    assert "mixed_float16" in d.message and "LossScaleOptimizer" in d.message and "scale_loss" in d.message
    fixed = apply_fix(source, d)
    assert "optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())" in fixed
    assert "        scaled_loss = optimizer.scale_loss(loss)\n" in fixed
    assert "tape.gradient(scaled_loss, model.trainable_variables)" in fixed
    assert run(fixed) == []
    assert d.fix.applicability == "unsafe"


def test_mp501_tf_keras_fix_inserts_before_gradient_inside_tape():
    source = K2_LOOP.format(policy="mixed_float16")
    [d] = run(source)
    fixed = apply_fix(source, d)
    assert "opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())" in fixed
    assert (
        "        scaled_loss = opt.get_scaled_loss(loss)\n"
        "        grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))"
    ) in fixed
    assert run(fixed) == []


def test_mp501_assumed_policy_and_unknown_optimizer_has_no_fix():
    source = """
        import tensorflow as tf
        import keras

        def train_step(model, optimizer, x, y):
            with tf.GradientTape() as tape:
                loss = keras.ops.mean(model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply(grads, model.trainable_variables)
    """
    assert run(source) == []
    [d] = run(source, assume_policy="mixed_float16")
    assert d.code == "MP501" and d.fix is None


def test_not_a_training_loop_or_not_applying_gradients():
    source = """
        import tensorflow as tf
        import keras
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.Adam()
        model.compile(optimizer=optimizer, loss="mse")

        def saliency(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                out = model(x)
            return tape.gradient(out, x)

        def step(x):
            with tf.GradientTape() as tape:
                loss = keras.ops.mean(model(x))
            optimizer.minimize(loss, model.trainable_variables, tape=tape)
    """
    assert run(source) == []


def test_manual_static_loss_scaling_is_quiet():
    source = """
        import tensorflow as tf
        import tf_keras as keras
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.layers.Dense(1, input_shape=(4,))])
        opt = keras.optimizers.SGD()
        LOSS_SCALE = 1024.0

        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(x))
                scaled = loss * LOSS_SCALE
            grads = [g / LOSS_SCALE for g in tape.gradient(scaled, model.trainable_variables)]
            opt.apply_gradients(zip(grads, model.trainable_variables))
    """
    assert run(source) == []


def test_keras3_scale_loss_on_plain_optimizer_is_mp501():
    source = """
        import tensorflow as tf
        import keras
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD()

        def step(x):
            with tf.GradientTape() as tape:
                loss = optimizer.scale_loss(keras.ops.mean(model(x)))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply(grads, model.trainable_variables)
    """
    [d] = run(source)
    assert d.code == "MP501" and "returns the loss unchanged" in d.message
    fixed = apply_fix(source, d)
    assert "keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD())" in fixed
    assert run(fixed) == []


def test_mp502_loss_scaled_outside_the_tape():
    source = """
        import tensorflow as tf
        import keras
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD())
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])

        def step(x):
            with tf.GradientTape() as tape:
                loss = keras.ops.mean(model(x))
            scaled_loss = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            optimizer.apply(grads, model.trainable_variables)
    """
    [d] = run(source)
    assert d.code == "MP502" and d.location.line == 10 and "returns None" in d.message and d.fix is None


def test_mp502_tf_keras_api_under_keras3_is_left_to_mp103():
    source = """
        import tensorflow as tf
        import keras
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD())
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])

        def step(x):
            with tf.GradientTape() as tape:
                scaled_loss = optimizer.get_scaled_loss(keras.ops.mean(model(x)))
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """
    assert run(source) == []
    # the same code under tf_keras: scaled but never unscaled
    [d] = run(source.replace("import keras", "import tf_keras as keras"))
    assert d.code == "MP502" and d.location.line == 9
    fixed = apply_fix(source.replace("import keras", "import tf_keras as keras"), d)
    assert "optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))" in fixed


def test_mp502_compiled_optimizer_respects_auto_scale_loss_false():
    source = """
        import tensorflow as tf
        import keras
        keras.mixed_precision.set_global_policy("mixed_float16")

        class M(keras.Model):
            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    loss = self.compute_loss(y=y, y_pred=self(x))
                grads = tape.gradient(loss, self.trainable_variables)
                self.optimizer.apply(grads, self.trainable_variables)
                return {}
    """
    [d] = run(source)
    assert d.code == "MP502" and "compile()" in d.message
    quiet = textwrap.dedent(source) + "\nM().compile(optimizer='adam', loss='mse', auto_scale_loss=False)\n"
    [d] = run(quiet)
    assert d.code == "MP501"  # no LossScaleOptimizer then: no loss scaling at all


def test_rules_are_documented_and_static_pass_does_not_import_tensorflow():
    from mpdoctor.registry import get_rule

    code = (
        "import sys, textwrap; from mpdoctor.config import Config; from mpdoctor.engine import check_source; "
        f"check_source(textwrap.dedent({K3_LOOP.format(policy='mixed_float16')!r}), 't.py', Config()); "
        "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    for code, passes in (("MP501", "ST"), ("MP502", "S"), ("MP503", "T")):
        rule = get_rule(code)
        assert rule.passes == passes and rule.fixable and rule.what and rule.bad and rule.good
