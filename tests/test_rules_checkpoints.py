"""MP301 static edge cases and messages; MP302-MP304 are artifact/trace-only (docs only)."""

import textwrap

import pytest

from mpdoctor.config import Config
from mpdoctor.diagnostics import Confidence
from mpdoctor.engine import check_source
from mpdoctor.fix.apply import apply_fixes


def run(source, keras_version=None, assume_policy=None):
    config = Config()
    config.keras_version = keras_version
    config.assume_policy = assume_policy
    diagnostics, error = check_source(textwrap.dedent(source), "t.py", config)
    assert error is None, error.render()
    return [d for d in diagnostics if d.code == "MP301"]


TF1 = """
    import tensorflow.compat.v1 as tf
    tf.disable_v2_behavior()
    {body}
    saver = tf.train.Saver({saver_args})
    with tf.Session() as sess:
        saver.restore(sess, "pretrained/model.ckpt")
"""


@pytest.mark.parametrize(
    "body,saver_args,expected",
    [
        ('w = tf.get_variable("w", [3, 3], tf.float16)', "", 1),
        ("w = tf.Variable(tf.zeros([3]), dtype=tf.bfloat16)", "", 1),
        ("w = tf.Variable(tf.zeros([3], dtype=tf.float16))", "", 1),
        ("x = tf.placeholder(tf.float16, [None, 4])\n    y = tf.layers.dense(x, 8)", "", 1),
        ('with tf.variable_scope("net", dtype=tf.float16):\n        w = tf.get_variable("w", [3])', "", 1),
        # NVIDIA's float32-master-weights recipe: the custom getter creates float32 variables
        (
            'with tf.variable_scope("net", custom_getter=fp32_getter):\n'
            '        w = tf.get_variable("w", [3], tf.float16)',
            "",
            0,
        ),
        ('w = tf.get_variable("w", [3, 3], tf.float16)', "builder=CastingBuilder()", 0),
        ('w = tf.get_variable("w", [3, 3], tf.float32)', "", 0),
        ('w = tf.get_variable("w", [3, 3])', "", 0),
    ],
)
def test_tf1_float16_graphs(body, saver_args, expected):
    source = textwrap.dedent(TF1.format(body=body, saver_args=saver_args))
    found = run(source)
    assert len(found) == expected
    if found:
        saver_line = next(i for i, line in enumerate(source.splitlines(), 1) if "Saver(" in line)
        assert found[0].location.line == saver_line  # the Saver constructor: where a builder= would go
        assert found[0].confidence is Confidence.MEDIUM
        assert "convert-checkpoint" in found[0].message and "builder=" in found[0].message
        assert found[0].fix.applicability == "unsafe"  # the source does not show the checkpoint's dtypes
        fixed = apply_fixes(textwrap.dedent(TF1.format(body=body, saver_args=saver_args)), found)
        assert "saver = tf.train.Saver(builder=CastOnRestoreSaverBuilder())" in fixed
        assert "import tensorflow as tf\n" not in fixed  # `tf` is already tensorflow.compat.v1: reused
        assert not run(fixed)


def test_tf1_graph_boundaries_and_builder_functions():
    source = """
        import tensorflow as tf

        def build_half():
            x = tf.compat.v1.placeholder(tf.float16, [None, 4])
            return tf.compat.v1.layers.dense(x, 4)

        with tf.Graph().as_default():
            build_half()
            saver = tf.compat.v1.train.Saver()
            with tf.compat.v1.Session() as sess:
                saver.restore(sess, "fp32/model.ckpt")

        with tf.Graph().as_default():
            w = tf.compat.v1.get_variable("w", [3], dtype=tf.float32)
            other = tf.compat.v1.train.Saver()
            with tf.compat.v1.Session() as sess:
                other.restore(sess, "fp32/model.ckpt")

        v = tf.compat.v1.get_variable("v", [3], dtype="float16")
        tf.compat.v1.reset_default_graph()
        w = tf.compat.v1.get_variable("w", [3])
        after_reset = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            after_reset.restore(sess, "fp32/model.ckpt")
    """
    found = run(source)
    assert [d.location.line for d in found] == [10]
    assert "build_half()" in found[0].message


def test_tf1_own_float16_checkpoint_is_not_reported():
    source = """
        import tensorflow as tf
        with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
            w = tf.compat.v1.get_variable("w", [3], dtype=tf.float16)
            saver = tf.compat.v1.train.Saver(max_to_keep=2)
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, "run/model.ckpt", global_step=1)
            saver.restore(sess, tf.train.latest_checkpoint("run"))
            path = saver.save(sess, "run/final.ckpt")
            saver.restore(sess, path)
    """
    assert run(source) == []


TF2 = """
    import tensorflow as tf
    import {keras}
    {setter}
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    tf.train.Checkpoint(model=model).restore("fp32/ckpt-1")
    model.load_weights({path})
"""


@pytest.mark.parametrize(
    "keras,setter,path,lines",
    [
        ("keras", 'keras.mixed_precision.set_global_policy("float16")', '"w.weights.h5"', [6]),
        ("keras", 'keras.config.set_dtype_policy("bfloat16")', '"fp32/ckpt"', [6]),  # Keras 3 refuses the format
        ("keras", 'keras.mixed_precision.set_global_policy("mixed_float16")', '"fp32/ckpt"', []),
        ("tf_keras as keras", 'keras.mixed_precision.set_global_policy("float16")', '"fp32/ckpt"', [6, 7]),
        ("tf_keras as keras", 'keras.backend.set_floatx("float16")', 'f"{RUN}/weights.h5"', [6]),
        ("tf_keras as keras", 'keras.mixed_precision.set_global_policy("float16")', "args.weights", [6]),
        ("tf_keras as keras", 'keras.mixed_precision.set_global_policy("mixed_bfloat16")', '"fp32/ckpt"', []),
    ],
)
def test_tf2_restores(keras, setter, path, lines):
    found = run(TF2.format(keras=keras, setter=setter, path=path))
    assert [d.location.line for d in found] == lines


def test_tf2_message_names_policy_and_escape_hatches():
    [d] = run(TF2.format(keras="keras", setter='keras.config.set_dtype_policy("bfloat16")', path='"x.keras"'))
    assert 'policy "bfloat16"' in d.message and 'use "mixed_bfloat16"' in d.message
    assert "convert-checkpoint IN OUT --dtype bfloat16" in d.message
    assert d.confidence is Confidence.MEDIUM
    assert d.fix.applicability == "unsafe"  # float32 variables change what the file saves too
    assert 'keras.config.set_dtype_policy("mixed_bfloat16")' in apply_fixes(
        textwrap.dedent(
            TF2.format(keras="keras", setter='keras.config.set_dtype_policy("bfloat16")', path='"x.keras"')
        ),
        [d],
    )


def test_tf2_restore_under_floatx_gets_no_policy_literal_fix():
    found = run(
        TF2.format(keras="tf_keras as keras", setter='keras.backend.set_floatx("float16")', path='f"{RUN}/weights.h5"')
    )
    assert found and all(d.fix is None for d in found)


def test_tf2_policy_set_after_model_and_non_model_objects():
    source = """
        import tensorflow as tf
        import keras
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])   # float32 variables
        keras.mixed_precision.set_global_policy("float16")
        tf.train.Checkpoint(model=model).restore("fp32/ckpt-1")
        tf.train.Checkpoint(step=tf.Variable(0), optimizer=keras.optimizers.Adam()).restore("fp32/ckpt-1")
    """
    assert run(source) == []


def test_tf2_resume_from_own_manager_is_quiet_but_foreign_directory_is_not():
    source = """
        import tensorflow as tf
        import keras
        keras.mixed_precision.set_global_policy("float16")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        ckpt = tf.train.Checkpoint(model=model)
        manager = tf.train.CheckpointManager(ckpt, "runs/fp16", max_to_keep=3)
        ckpt.restore(manager.latest_checkpoint)
        ckpt.restore(tf.train.latest_checkpoint("runs/fp16"))
        ckpt.restore(tf.train.latest_checkpoint("runs/fp32"))
        manager.save()
    """
    assert [d.location.line for d in run(source)] == [10]


def test_artifact_only_rules_have_docs_but_no_static_pass():
    from mpdoctor.registry import get_rule

    assert get_rule("MP301").passes == "STA" and get_rule("MP301").fixable
    for code, name, passes in (
        ("MP302", "checkpoint-float16-overflow", "TA"),
        ("MP303", "checkpoint-float16-underflow", "TA"),
        ("MP304", "checkpoint-unmatched", "TA"),
    ):
        rule = get_rule(code)
        assert rule.name == name and rule.passes == passes and not rule.fixable and rule.what and rule.why
