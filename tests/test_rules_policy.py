"""MP101-MP104 (mpdoctor.rules.policy): messages, fixes and edge cases beyond the fixture files."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from mpdoctor.config import Config
from mpdoctor.diagnostics import Confidence
from mpdoctor.engine import check_source
from mpdoctor.fix.apply import apply_fixes as _apply_fixes


def run(source: str, code: str, keras_version: int | None = None, directory: Path = Path(__file__).parent):
    config = Config()
    config.keras_version = keras_version
    # By default in the tests folder: judged against tests/requirements.txt like the fixtures (not mpdoctor's own
    # [tf] range).
    path = str(directory / "model.py")
    diagnostics, error = check_source(textwrap.dedent(source), "model.py", config, path=path)
    assert error is None, error.render()
    return [d for d in diagnostics if d.code == code]


def lines(diagnostics) -> list[int]:
    return [d.location.line for d in diagnostics]


def apply_fixes(source: str, diagnostics) -> str:
    """Apply every fix; the result must parse."""
    text = _apply_fixes(textwrap.dedent(source), diagnostics)
    ast.parse(text)
    return text


def fixed(source: str, code: str, keras_version: int | None = None) -> str:
    return apply_fixes(source, run(source, code, keras_version))


# ---------------------------------------------------------------- MP101


def test_mp101_names_first_layer_and_line():
    src = """
        import keras
        from keras import layers
        x = layers.Dense(4)
        y = layers.Conv2D(8, 3)
        keras.mixed_precision.set_global_policy("mixed_float16")
    """
    [d] = run(src, "MP101")
    assert d.location.line == 6
    assert "Dense (line 4)" in d.message and "1 more construction" in d.message and "float32" in d.message
    assert d.fix is None


def test_mp101_builder_called_later_only_is_quiet():
    src = """
        import keras
        def build():
            return keras.Sequential([keras.layers.Dense(4)])
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = build()
    """
    assert run(src, "MP101") == []


def test_mp101_nested_builder_called_before():
    src = """
        import keras
        def block():
            return keras.layers.Dense(4)
        def build():
            return keras.Sequential([block()])
        model = build()
        keras.mixed_precision.set_global_policy("mixed_float16")
    """
    [d] = run(src, "MP101")
    assert "build() (line 7) built Dense (line 4)" in d.message


def test_mp101_cleanup_and_same_policy_and_unknown_policy_are_quiet():
    src = """
        import keras
        import sys
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.layers.Dense(4)])
        keras.mixed_precision.set_global_policy("mixed_float16")
        keras.mixed_precision.set_global_policy(sys.argv[1])
        keras.mixed_precision.set_global_policy("float32")
    """
    assert run(src, "MP101") == []


def test_mp101_input_and_preprocessing_layers_are_quiet():
    src = """
        import keras
        inputs = keras.layers.Input((8,))
        norm = keras.layers.Normalization()
        aug = keras.Sequential([keras.layers.RandomFlip()])
        keras.mixed_precision.set_global_policy("mixed_float16")
    """
    assert run(src, "MP101") == []


def test_mp101_other_function_scope_is_separate():
    src = """
        import keras
        encoder = keras.layers.Dense(4)
        def main():
            keras.mixed_precision.set_global_policy("mixed_float16")
            return keras.Sequential([keras.layers.Dense(2)])
    """
    assert run(src, "MP101") == []


def test_mp101_set_floatx_counts_in_keras2():
    src = """
        import tf_keras as keras
        model = keras.Sequential([keras.layers.Dense(4, input_shape=(2,))])
        keras.backend.set_floatx("float16")
    """
    assert lines(run(src, "MP101")) == [4]


# ---------------------------------------------------------------- MP102


def test_mp102_literal_fix_keeps_quotes():
    src = """
        from tensorflow.keras import mixed_precision
        import tensorflow as tf
        mixed_precision.set_global_policy('float16')
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        model.fit([[1.0]], [[1.0]])
    """
    [d] = run(src, "MP102", 3)
    assert d.location.line == 4 and d.confidence == Confidence.HIGH
    assert "mixed_float16" in d.message
    assert "mixed_precision.set_global_policy('mixed_float16')" in fixed(src, "MP102", 3)


def test_mp102_policy_object_and_bfloat16():
    src = """
        import keras
        keras.config.set_dtype_policy(keras.mixed_precision.Policy("bfloat16"))
        model = keras.Sequential([keras.layers.Dense(1)])
        model.train_on_batch([[1.0]], [[1.0]])
    """
    assert 'Policy("mixed_bfloat16")' in fixed(src, "MP102")


def test_mp102_shared_constant_gets_no_fix():
    src = """
        import keras
        import tensorflow as tf
        DTYPE = "float16"
        keras.mixed_precision.set_global_policy(DTYPE)
        model = keras.Sequential([keras.layers.Dense(1)])
        model.fit(tf.cast([[1.0]], DTYPE), [[1.0]])
    """
    [d] = run(src, "MP102")
    assert d.fix is None


def test_mp102_floatx_fix_is_unsafe_and_uses_file_spelling():
    src = """
        import tensorflow as tf
        tf.keras.backend.set_floatx("float16")
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        model.fit([[1.0]], [[1.0]])
    """
    [d] = run(src, "MP102", 2)
    assert d.fix.applicability == "unsafe"
    assert 'tf.keras.mixed_precision.set_global_policy("mixed_float16")' in fixed(src, "MP102", 2)


def test_mp102_floatx_alias_module_gets_no_fix():
    src = """
        from tensorflow.keras import backend as K
        import tensorflow as tf
        K.set_floatx("float16")
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        model.fit([[1.0]], [[1.0]])
    """
    [d] = run(src, "MP102", 2)
    assert d.fix is None


def test_mp102_floatx_ignored_when_a_policy_is_set_explicitly():
    src = """
        import keras
        keras.config.set_floatx("float16")
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.layers.Dense(1)])
        model.fit([[1.0]], [[1.0]])
    """
    assert run(src, "MP102") == []


def test_mp102_gradient_tape_loop_counts_as_training():
    src = """
        import keras, tensorflow as tf
        keras.mixed_precision.set_global_policy("float16")
        model = keras.Sequential([keras.layers.Dense(1)])
        opt = keras.optimizers.Adam()
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(tf.ones((1, 2))))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    """
    assert lines(run(src, "MP102")) == [3]


def test_mp102_sklearn_fit_is_not_training():
    src = """
        import keras
        from sklearn.linear_model import LogisticRegression
        keras.mixed_precision.set_global_policy("float16")
        model = keras.Sequential([keras.layers.Dense(1)])
        clf = LogisticRegression()
        clf.fit([[0.0], [1.0]], [0, 1])
    """
    assert run(src, "MP102") == []


def test_mp102_mixed_policy_is_quiet():
    src = """
        import keras
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.layers.Dense(1)])
        model.fit([[1.0]], [[1.0]])
    """
    assert run(src, "MP102") == []


# ---------------------------------------------------------------- MP103

ALIAS_SRC = """
    import tensorflow as tf
    from tensorflow.keras.mixed_precision import experimental as mixed_precision
    policy = mixed_precision.Policy("mixed_float16")
    mixed_precision.set_policy(policy)
    opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(), "dynamic")
    fixed_scale = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(), loss_scale=128)
"""


def test_mp103_alias_import_and_uses():
    found = run(ALIAS_SRC, "MP103", 2)
    assert lines(found) == [3, 5, 6, 7]  # Policy(...) is fine once the import is fixed
    assert "ImportError" in found[0].message
    assert found[3].fix is None  # a fixed loss scale has no mechanical replacement
    out = apply_fixes(ALIAS_SRC, found)
    assert "from tensorflow.keras import mixed_precision\n" in out
    assert "mixed_precision.set_global_policy(policy)" in out
    assert "mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())\n" in out
    assert 'mixed_precision.Policy("mixed_float16")' in out


def test_mp103_fix_is_idempotent():
    once = fixed(ALIAS_SRC, "MP103", 2)
    assert fixed(once, "MP103", 2) == once


def test_mp103_spelled_out_keeps_prefix():
    src = """
        import tensorflow as tf
        tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
        p = tf.keras.mixed_precision.experimental.Policy("mixed_float16")
        layer_policy = tf.keras.mixed_precision.experimental.get_layer_policy(layer)
    """
    out = fixed(src, "MP103", 3)
    assert 'tf.keras.mixed_precision.set_global_policy("mixed_float16")' in out
    assert 'tf.keras.mixed_precision.Policy("mixed_float16")' in out
    assert "layer_policy = layer.dtype_policy" in out


def test_mp103_names_imported_from_experimental_module():
    src = """
        from tensorflow.keras.mixed_precision.experimental import set_policy, LossScaleOptimizer
        import tensorflow as tf
        set_policy("mixed_float16")
        opt = LossScaleOptimizer(tf.keras.optimizers.SGD(), loss_scale="dynamic")
    """
    found = run(src, "MP103", 2)
    assert lines(found) == [2, 5]
    out = apply_fixes(src, found)
    assert "from tensorflow.keras.mixed_precision import set_global_policy as set_policy, LossScaleOptimizer" in out
    assert "opt = LossScaleOptimizer(tf.keras.optimizers.SGD())" in out


def test_mp103_graph_rewrite_fix_sets_the_policy_and_wraps_the_keras_optimizer():
    src = """
        import tensorflow as tf
        opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(tf.keras.optimizers.Adam())
    """
    [d] = run(src, "MP103", 3)
    assert 'set_global_policy("mixed_float16")' in d.message
    assert d.fix.applicability == "unsafe"  # every layer then computes in float16
    fixed = apply_fixes(textwrap.dedent(src), [d])
    assert fixed.splitlines()[1:5] == [
        "import tensorflow as tf",
        "",
        'tf.keras.mixed_precision.set_global_policy("mixed_float16")',
        "opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())",
    ]


def test_mp103_graph_rewrite_of_a_tf1_optimizer_has_no_fix():
    src = """
        import tensorflow as tf
        opt = tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(tf.compat.v1.train.AdamOptimizer())
    """
    [d] = run(src, "MP103", 3)
    assert d.fix is None


def test_mp103_compat_v1_confidence():
    keras_opt = """
        import keras, tensorflow as tf
        opt = tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(keras.optimizers.Adam())
    """
    graph = """
        import tensorflow as tf
        tf.compat.v1.disable_eager_execution()
        opt = tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite(tf.compat.v1.train.AdamOptimizer())
        sess = tf.compat.v1.Session()
    """
    assert [d.confidence for d in run(keras_opt, "MP103")] == [Confidence.HIGH]
    assert [d.confidence for d in run(graph, "MP103", 2)] == [Confidence.LOW]


def test_mp103_get_scaled_loss_only_on_keras3():
    src = """
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
        def step(loss, tape, variables):
            scaled = opt.get_scaled_loss(loss)
            grads = opt.get_unscaled_gradients(tape.gradient(scaled, variables))
            opt.apply_gradients(zip(grads, variables))
    """
    assert run(src, "MP103", 2) == []
    out = fixed(src, "MP103", 3)
    assert "scaled = opt.scale_loss(loss)" in out
    assert "grads = tape.gradient(scaled, variables)" in out


def test_mp103_user_defined_get_scaled_loss_is_quiet():
    src = """
        import keras
        class Scaler:
            def get_scaled_loss(self, loss):
                return loss * 2
        s = Scaler().get_scaled_loss(1.0)
    """
    assert run(src, "MP103") == []


def test_mp103_current_api_is_quiet():
    src = """
        from tensorflow.keras import mixed_precision
        mixed_precision.set_global_policy("mixed_float16")
        opt = mixed_precision.LossScaleOptimizer(None)
        print(mixed_precision.global_policy())
    """
    assert run(src, "MP103", 3) == [] and run(src, "MP103", 2) == []


# ---------------------------------------------------------------- MP104


def test_mp104_message_and_confidence():
    src = """
        import keras
        import tensorflow_hub as hub
        model = keras.Sequential([keras.Input((4,)), hub.KerasLayer("/m")])
    """
    [d] = run(src, "MP104")
    assert "Only instances of keras.Layer can be added" in d.message
    assert "TF_USE_LEGACY_KERAS=1" in d.message and "TFSMLayer" in d.message
    assert d.confidence == Confidence.HIGH and d.fix is None


def test_mp104_uncertain_version_lowers_confidence(monkeypatch, tmp_path):
    """Nothing declared and no TensorFlow installed, or an unpinned dependency: the target allows Keras 2 and 3, so
    MP104 is reported for the Keras 3 part, at medium confidence, and says so."""
    from mpdoctor.project import environment, target

    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    target.new_run()
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    monkeypatch.setattr(environment, "tensorflow_version", lambda: None)
    src = """
        import tensorflow as tf
        import tensorflow_hub as hub
        model = tf.keras.Sequential([hub.KerasLayer("/m", input_shape=(4,))])
    """
    [d] = run(src, "MP104", directory=tmp_path)
    assert d.confidence == Confidence.MEDIUM
    monkeypatch.setattr(environment, "tensorflow_version", lambda: (2, 21))
    (tmp_path / "requirements.txt").write_text("tensorflow\ntensorflow-hub\n")
    target.new_run()
    [d] = run(src, "MP104", directory=tmp_path)
    assert d.confidence == Confidence.MEDIUM and "on part of its target" in d.message
    assert "TensorFlow any version (unpinned) from requirements.txt:1" in d.message


def test_mp104_keras2_and_eager_use_are_quiet():
    src = """
        import tensorflow as tf
        import tensorflow_hub as hub
        model = tf.keras.Sequential([hub.KerasLayer("/m", input_shape=(4,))])
        out = hub.KerasLayer("/m")(tf.ones((1, 4)))
        module = hub.load("/m")
    """
    assert run(src, "MP104", 2) == []
    assert lines(run(src, "MP104", 3)) == [4]


def test_mp104_functional_through_model_output():
    src = """
        import keras
        import tensorflow_hub as hub
        base = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
        head = hub.KerasLayer("/m")
        y = head(base.output)
    """
    [d] = run(src, "MP104")
    assert d.location.line == 5 and "KerasTensor" in d.message


@pytest.mark.parametrize("code", ["MP101", "MP102", "MP103", "MP104"])
def test_rules_documented(code):
    from mpdoctor.registry import get_rule

    rule = get_rule(code)
    assert rule.what and rule.why and rule.bad and rule.good and rule.fix
    ast.parse(rule.bad)
    ast.parse(rule.good)


def test_mp103_experimental_attribute_of_current_module():
    src = """
        import tensorflow as tf
        from tensorflow.keras import mixed_precision
        mixed_precision.experimental.set_policy("mixed_float16")
        opt = mixed_precision.experimental.LossScaleOptimizer(tf.keras.optimizers.Adam())
    """
    found = run(src, "MP103", 2)
    assert lines(found) == [4, 5]
    out = apply_fixes(src, found)
    assert 'mixed_precision.set_global_policy("mixed_float16")' in out
    assert "opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())" in out


def test_mp102_image_data_generator_fit_is_not_training():
    src = """
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("float16")
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        datagen = tf.keras.preprocessing.image.ImageDataGenerator(featurewise_center=True)
        datagen.fit(images)
        model.predict(images)
    """
    assert run(src, "MP102", 3) == []


def test_mp101_switch_between_low_precision_policies_is_quiet():
    src = """
        import keras
        keras.config.set_dtype_policy("mixed_bfloat16")
        a = keras.Sequential([keras.layers.Dense(1)])
        keras.mixed_precision.set_global_policy("mixed_float16")
    """
    assert run(src, "MP101") == []


def test_mp103_compatibility_shims_are_quiet():
    src = """
        import tensorflow as tf
        try:
            from tensorflow.keras.mixed_precision import experimental as mixed_precision
        except ImportError:
            from tensorflow.keras import mixed_precision
        if hasattr(tf.keras.mixed_precision, "set_global_policy"):
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
        else:
            tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
        if tf.__version__ < "2.4":
            opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(opt, "dynamic")
    """
    assert run(src, "MP103", 2) == []


def test_mp103_ignores_tf1_loss_scale_classes_named_but_not_called():
    source = """
        import tensorflow as tf

        def from_legacy(loss_scale):
            table = {"FixedLossScale": tf.compat.v1.mixed_precision.FixedLossScale}
            if isinstance(loss_scale, tf.compat.v1.mixed_precision.FixedLossScale):
                return loss_scale._loss_scale_value
            return tf.compat.v1.mixed_precision.DynamicLossScale()
        """
    assert lines(run(source, "MP103")) == [8]
