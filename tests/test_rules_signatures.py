"""MP2xx (SavedModel and TF Hub signatures): rule data, messages, fixes and edge cases of the static checks."""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest

from mpdoctor.config import Config
from mpdoctor.diagnostics import Confidence, Severity
from mpdoctor.engine import check_source
from mpdoctor.fix.apply import apply_fixes
from mpdoctor.registry import get_rule

FIXTURES = Path(__file__).parent / "fixtures"


def check(source: str, keras: int | None = None, codes=("MP201", "MP207")):
    config = Config()
    config.keras_version = keras
    diagnostics, error = check_source(textwrap.dedent(source), "model.py", config)
    assert error is None, error.render()
    return [d for d in diagnostics if d.code in codes]


def fix_all(text: str, diagnostics) -> str:
    fixed = apply_fixes(text, diagnostics)
    ast.parse(fixed)
    return fixed


# ------------------------------------------------------------------------------------------- rule data


@pytest.mark.parametrize(
    "code, name, severity, passes, fixable",
    [
        ("MP201", "savedmodel-input-dtype", "error", "STA", True),
        ("MP202", "savedmodel-unreadable", "warning", "TA", False),
        ("MP203", "exported-signature-float16", "warning", "T", True),
        ("MP207", "cast-undone-by-autocast", "warning", "ST", True),
    ],
)
def test_rule_data_matches_the_catalogue(code, name, severity, passes, fixable):
    rule = get_rule(code)
    assert (rule.name, rule.severity, rule.passes, rule.fixable) == (name, Severity(severity), passes, fixable)
    for text in (rule.summary, rule.what, rule.why, rule.bad, rule.good, rule.fix):
        assert text.strip()


def test_bad_and_good_examples_parse():
    for code in ("MP201", "MP202", "MP203", "MP207"):
        rule = get_rule(code)
        ast.parse(rule.bad)
        ast.parse(rule.good)


# ------------------------------------------------------------------------------------------- MP201

SEED = """\
    import os
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tensorflow_hub as hub
    tf.keras.mixed_precision.set_global_policy('mixed_float16')
    handle = "/models/resnet_v1_50_feature_vector"
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(224, 224, 3)),
        tf.keras.layers.Lambda(lambda x: tf.cast(x, tf.float32)),
        hub.KerasLayer(handle, trainable=False),
        tf.keras.layers.Dense(2, dtype=tf.float32),
    ])
    """


def test_mp201_message_confidence_and_fix():
    found = check(SEED, codes=("MP201",))
    assert len(found) == 1
    d = found[0]
    assert (d.location.line, d.location.column) == (10, 5)
    assert d.confidence is Confidence.MEDIUM
    assert "hub.KerasLayer" in d.message and '"mixed_float16"' in d.message
    assert "a SavedModel exported in float32 (most TF Hub models) has no float16 concrete function" in d.message
    assert 'dtype="float32"' in d.message and "fails when it is built" in d.message
    fixed = fix_all(textwrap.dedent(SEED), found)
    assert "hub.KerasLayer(handle, trainable=False, dtype=tf.float32)," in fixed  # spelled like the Dense's dtype
    assert check(fixed, codes=("MP201",)) == []


def test_mp201_and_mp207_fixes_are_the_same_edit_and_clear_both():
    found = check(SEED)
    assert sorted(d.code for d in found) == ["MP201", "MP207"]
    mp201 = next(d for d in found if d.code == "MP201")
    mp207 = next(d for d in found if d.code == "MP207")
    assert mp207.location.line == 9  # at the Lambda, naming the hub layer
    assert "hub.KerasLayer (line 10" in mp207.message
    assert mp207.fix.edits == mp201.fix.edits  # edits the hub layer, leaves the cast
    fixed = fix_all(textwrap.dedent(SEED), found)
    assert fixed.count("dtype=tf.float32") == 2  # the Dense's own and one on the hub layer
    assert "tf.keras.layers.Lambda(lambda x: tf.cast(x, tf.float32))," in fixed
    assert check(fixed) == []


def test_mp201_tfsmlayer_bfloat16_message():
    found = check(
        """\
        import keras
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
        layer = keras.layers.TFSMLayer("exported", call_endpoint="serving_default")
        """,
        codes=("MP201",),
    )
    assert len(found) == 1
    assert found[0].message.startswith("TFSMLayer computes in bfloat16")
    assert "has no bfloat16 concrete function" in found[0].message
    assert "predict/fit fail" in found[0].message


def test_mp201_replaces_a_float16_dtype_and_skips_star_kwargs():
    src = """\
        import tf_keras as keras
        import tensorflow_hub as hub
        a = hub.KerasLayer("/m", dtype="float16")
        opts = {"trainable": False}
        keras.mixed_precision.set_global_policy("mixed_float16")
        b = hub.KerasLayer("/m", **opts)
        """
    found = check(src, codes=("MP201",))
    assert [d.location.line for d in found] == [3, 6]
    assert found[0].message.startswith('hub.KerasLayer computes in float16 (dtype="float16")')
    assert fix_all(textwrap.dedent(src), found[:1]).count('hub.KerasLayer("/m", dtype="float32")') == 1
    assert found[1].fix is None


def test_mp201_quiet_for_unknown_dtype_and_text_models():
    assert (
        check(
            """\
        import tf_keras as keras
        import tensorflow as tf
        import tensorflow_hub as hub
        keras.mixed_precision.set_global_policy("mixed_float16")
        def make(dtype):
            return hub.KerasLayer("/m", dtype=dtype)
        use = hub.KerasLayer("https://tfhub.dev/google/universal-sentence-encoder/4")
        ids = hub.KerasLayer("/m", input_shape=[], dtype=tf.int32)
        """,
            codes=("MP201",),
        )
        == []
    )


def test_mp201_policy_set_inside_a_function_before_building():
    found = check(
        """\
        import tf_keras as keras
        import tensorflow_hub as hub
        def build():
            keras.mixed_precision.set_global_policy("mixed_float16")
            return keras.Sequential([hub.KerasLayer("/m")])
        """,
        codes=("MP201",),
    )
    assert [d.location.line for d in found] == [5]


# ------------------------------------------------------------------------------------------- MP207


def test_mp207_functional_tf_cast_keras2_but_not_keras3():
    src = """\
        import tensorflow as tf
        from tensorflow.keras import layers, mixed_precision
        mixed_precision.set_global_policy("mixed_float16")
        inputs = tf.keras.Input((8,))
        x = tf.cast(layers.Dense(8)(inputs), tf.float32)
        out = layers.Dense(2)(x)
        """
    found = check(src, keras=2)
    assert [(d.code, d.location.line) for d in found] == [("MP207", 5)]
    assert "Dense (line 6" in found[0].message
    fixed = fix_all(textwrap.dedent(src), found)
    assert 'out = layers.Dense(2, dtype="float32")(x)' in fixed
    assert check(fixed, keras=2) == []
    # Keras 3: tf.cast on a KerasTensor raises, it is not silently undone.
    assert check(src, keras=3) == []


def test_mp207_second_argument_only_on_keras3():
    src = """\
        import keras
        from keras import layers
        keras.mixed_precision.set_global_policy("mixed_float16")
        q = keras.Input((4, 8))
        v = keras.ops.cast(keras.Input((4, 8)), "float32")
        out = layers.Attention()(q, v)
        first = layers.Add()([q, keras.ops.cast(q, "float32")])
        """
    assert [d.location.line for d in check(src, keras=3)] == [5, 7]
    assert [d.location.line for d in check(src, keras=2)] == [7]  # nested in the first argument: still autocast


def test_mp207_one_cast_two_consumers_one_diagnostic_fix_both():
    src = """\
        import tf_keras as keras
        import tensorflow as tf
        keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = keras.Input((8,))
        x = keras.layers.Lambda(lambda t: tf.cast(t, "float32"))(inputs)
        a = keras.layers.Dense(2)(x)
        b = keras.layers.Dense(3)(x)
        """
    found = check(src)
    assert len(found) == 1 and "and 1 more layer" in found[0].message
    assert len(found[0].fix.edits) == 2
    assert check(fix_all(textwrap.dedent(src), found)) == []


def test_mp207_no_fix_when_consumer_cannot_take_dtype():
    src = """\
        import tf_keras as keras
        import tensorflow as tf
        keras.mixed_precision.set_global_policy("mixed_float16")
        class Head(keras.layers.Layer):
            def __init__(self, units):
                super().__init__()
                self.units = units
            def call(self, x):
                return x
        cfg = {"units": 4}
        model = keras.Sequential([
            keras.layers.Lambda(lambda t: tf.cast(t, tf.float32)),
            Head(4),
        ])
        other = keras.Sequential([
            keras.layers.Lambda(lambda t: tf.cast(t, tf.float32)),
            keras.layers.Dense(**cfg),
        ])
        """
    found = check(src)
    assert [d.location.line for d in found] == [12, 16]
    assert all(d.fix is None for d in found)


def test_mp207_cast_function_spellings():
    src = """\
        import tf_keras as keras
        import tensorflow as tf
        keras.mixed_precision.set_global_policy("mixed_float16")
        to32 = lambda x: tf.cast(x, tf.float32)
        def also32(x):
            return tf.dtypes.cast(x, dtype="float32")
        def not_just_a_cast(x):
            return tf.cast(x, tf.float32) / 255.0
        model = keras.Sequential([
            keras.layers.Lambda(to32),
            keras.layers.Dense(4),
            keras.layers.Lambda(also32),
            keras.layers.Dense(4),
            keras.layers.Lambda(not_just_a_cast),
            keras.layers.Dense(4),
            keras.layers.Lambda(lambda x: tf.cast(x, tf.float16)),
            keras.layers.Dense(4),
            keras.layers.Lambda(lambda x, y: tf.cast(y, tf.float32)),
            keras.layers.Dense(4),
        ])
        """
    assert [d.location.line for d in check(src)] == [10, 12]


def test_mp207_consumers_that_do_not_autocast():
    src = """\
        import keras
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.layers.Lambda(lambda x: keras.ops.cast(x, "float32")),
            keras.layers.LayerNormalization(),
            keras.layers.Lambda(lambda x: keras.ops.cast(x, "float32")),
            keras.layers.Embedding(100, 8),
        ])
        """
    assert check(src, keras=3) == []
    assert [d.location.line for d in check(src, keras=2)] == [4]  # tf_keras LayerNormalization autocasts


def test_mp207_only_float16_policies_in_force():
    src = """\
        import tf_keras as keras
        import tensorflow as tf
        model = keras.Sequential([
            keras.layers.Lambda(lambda x: tf.cast(x, tf.float32)),
            keras.layers.Dense(4, dtype="mixed_bfloat16"),
        ])
        keras.mixed_precision.set_global_policy("mixed_float16")
        """
    found = check(src)
    assert [d.location.line for d in found] == [4]
    assert '"mixed_bfloat16"' in found[0].message and "back to bfloat16" in found[0].message
    assert found[0].fix is None  # an explicit dtype is the user's choice: no edit


def test_static_pass_does_not_import_tensorflow():
    import subprocess

    code = (
        "import sys; from mpdoctor.config import Config; from mpdoctor.engine import check_source; "
        f"check_source({textwrap.dedent(SEED)!r}, 'm.py', Config()); "
        "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_sublayer_policy_is_the_global_one_not_the_outer_dtype():
    src = """\
        import tf_keras as keras
        import tensorflow_hub as hub
        class Wrapper(keras.layers.Layer):
            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                self.hub = hub.KerasLayer("/m")
        w = Wrapper(dtype="mixed_float16")   # no global policy: the hub sublayer computes in float32
        """
    assert check(src, codes=("MP201",)) == []


def test_mp207_first_in_sequential_is_medium_confidence():
    src = """\
        import tf_keras as keras
        import tensorflow as tf
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.layers.Lambda(lambda x: tf.cast(x, tf.float32), input_shape=(28, 28)),  # maybe uint8 data
            keras.layers.Flatten(),
        ])
        """
    found = check(src)
    assert [d.location.line for d in found] == [5]
    assert found[0].confidence is Confidence.MEDIUM


def test_mp201_hub_layer_in_a_keras3_file_points_at_mp104():
    found = check(
        """\
        import tensorflow as tf
        import tensorflow_hub as hub
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        model = tf.keras.Sequential([hub.KerasLayer("/m")])
        """,
        keras=3,
        codes=("MP201",),
    )
    assert len(found) == 1 and "(MP104)" in found[0].message
