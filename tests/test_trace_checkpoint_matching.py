"""MP304: a traced restore that leaves model variables without a value, or checkpoint values unused. Each script
checks its own ground truth when run: it prints whether the restored weights equal the saved ones."""

from __future__ import annotations

import textwrap

import pytest
from trace_support import run_python, trace_check

pytest.importorskip("tensorflow")

KERAS = {False: "import keras", True: "import tf_keras as keras"}

OBJECT_BASED = """\
import os
import tempfile

import numpy as np
import tensorflow as tf
{import_keras}

keras.mixed_precision.set_global_policy("mixed_float16")


def _net():
    inputs = keras.Input((4,))
    x = keras.layers.Dense(8, name="d1")(inputs)
    outputs = keras.layers.Dense(2, name="d2", dtype="float32")(x)
    return keras.Model(inputs, outputs)


_SAVED = _net()
_PATH = tf.train.Checkpoint(model=_SAVED, step=tf.Variable(3)).save(os.path.join(tempfile.mkdtemp(), "ckpt"))


def build_model():
    model = _net()
    {restore}
    return model


if __name__ == "__main__":
    same = all(np.array_equal(a, b) for a, b in zip(build_model().get_weights(), _SAVED.get_weights()))
    print("restored" if same else "not restored")
"""


def _object_script(tmp_path, legacy: bool, restore: str):
    script = tmp_path / "restore.py"
    script.write_text(OBJECT_BASED.format(import_keras=KERAS[legacy], restore=restore))
    return script


def _mp304(diagnostics):
    return [d for d in diagnostics if d.code in ("MP304", "MP001")]


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_renamed_checkpoint_attribute_restores_nothing_and_is_mp304(tmp_path, legacy):
    script = _object_script(tmp_path, legacy, "tf.train.Checkpoint(net=model).restore(_PATH).expect_partial()")
    truth = run_python(script, legacy=legacy)
    assert truth.stdout.strip().endswith("not restored"), truth.stderr[-2000:]
    [finding] = _mp304(trace_check(script, legacy=legacy))
    assert finding.code == "MP304" and finding.location.line == 24
    assert "4 variables got no value" in finding.message and "d1/kernel" in finding.message
    assert "checkpoint values matched no object" in finding.message


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_matching_restore_with_declared_partial_checkpoint_is_clean(tmp_path, legacy):
    """The checkpoint also holds `step`, which this restore does not ask for: expect_partial() declares that."""
    script = _object_script(tmp_path, legacy, "tf.train.Checkpoint(model=model).restore(_PATH).expect_partial()")
    truth = run_python(script, legacy=legacy)
    assert truth.stdout.strip().endswith("restored") and "not" not in truth.stdout, truth.stderr[-2000:]
    assert _mp304(trace_check(script, legacy=legacy)) == []


def test_unused_checkpoint_values_without_expect_partial_are_mp304(tmp_path):
    script = _object_script(tmp_path, False, "tf.train.Checkpoint(model=model).restore(_PATH)")
    [finding] = _mp304(trace_check(script, legacy=False))
    assert "variables got no value" not in finding.message
    assert "1 checkpoint value matched no object ((root).step)" in finding.message


def test_tf_keras_load_weights_into_a_deeper_model_leaves_the_new_layer_unrestored(tmp_path):
    script = tmp_path / "weights.py"
    script.write_text(
        textwrap.dedent("""\
        import os
        import tempfile

        import tf_keras as keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        _PREFIX = os.path.join(tempfile.mkdtemp(), "weights")
        keras.Sequential([keras.Input((4,)), keras.layers.Dense(8)]).save_weights(_PREFIX)


        def build_model():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(2)])
            model.load_weights(_PREFIX)
            return model
        """)
    )
    [finding] = _mp304(trace_check(script, legacy=True))
    assert finding.location.line == 13 and finding.message.startswith("model.load_weights(")
    assert "2 variables got no value" in finding.message


TF1 = """\
import os
import tempfile

import tensorflow as tf

tf.compat.v1.disable_eager_execution()
_PATH = os.path.join(tempfile.mkdtemp(), "model.ckpt")
with tf.Graph().as_default():
    tf.compat.v1.get_variable("w", [2, 2])
    {extra}
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        tf.compat.v1.train.Saver().save(sess, _PATH)

with tf.Graph().as_default():
    tf.compat.v1.get_variable("w", [2, 2])
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
        saver.restore(sess, _PATH)
"""


@pytest.mark.parametrize(
    "extra,expected",
    [
        ('tf.compat.v1.get_variable("old_scope/b", [2])', ["MP304"]),
        ("pass", []),
    ],
    ids=["unused-key", "same-variables"],
)
def test_tf1_saver_restore_reports_checkpoint_keys_no_variable_reads(tmp_path, extra, expected):
    script = tmp_path / "tf1.py"
    script.write_text(TF1.format(extra=extra))
    assert run_python(script, legacy=True).returncode == 0  # a Saver ignores extra keys silently
    found = _mp304(trace_check(script, legacy=True))
    assert [d.code for d in found] == expected, [d.message for d in found]
    if found:
        assert found[0].location.line == 19 and "old_scope/b" in found[0].message


CLI_MODEL = """\
{import_keras}

keras.mixed_precision.set_global_policy("mixed_float16")


def build_model():
    inputs = keras.Input((4,))
    x = keras.layers.Dense(8, name="d1")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, name="d2", dtype="float32")(x))
"""


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_checkpoint_option_is_matched_against_the_model(tmp_path, legacy):
    """`check --checkpoint`: a checkpoint written from the same architecture (as `model=`, or by tf_keras
    save_weights with the model as root) matches; one written under other names does not."""
    import os
    import subprocess
    import sys

    from mpdoctor.config import Config
    from mpdoctor.engine import TraceOptions, check_source

    script = tmp_path / "model.py"
    script.write_text(CLI_MODEL.format(import_keras=KERAS[legacy]))
    subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""\
        import tensorflow as tf
        {KERAS[legacy]}
        inputs = keras.Input((4,))
        model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Dense(8)(inputs)))
        tf.train.Checkpoint(model=model).write({str(tmp_path / "good")!r})
        tf.train.Checkpoint(net=model, extra=tf.Variable(1.0)).write({str(tmp_path / "renamed")!r})
        """),
        ],
        check=True,
        capture_output=True,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1" if legacy else "0"),
    )
    found = {}
    os.environ["TF_USE_LEGACY_KERAS"] = "1" if legacy else "0"
    try:
        for name in ("good", "renamed"):
            diagnostics, error = check_source(
                script.read_text(),
                "model.py",
                Config(),
                path=str(script),
                trace=TraceOptions(enabled=True, checkpoints=(str(tmp_path / name),)),
            )
            assert error is None
            found[name] = _mp304(diagnostics)
    finally:
        os.environ.pop("TF_USE_LEGACY_KERAS")
    assert found["good"] == []
    [finding] = found["renamed"]
    assert finding.location.line == 9 and finding.message.startswith(f"--checkpoint {tmp_path / 'renamed'}: ")
    assert "4 variables got no value" in finding.message and "(root).extra" in finding.message


WRITTEN = """\
import os
import tempfile

import numpy as np
import tensorflow as tf
{import_keras}


def _net(extra):
    layers = [keras.Input((4,)), keras.layers.Dense(2, name="d1")]
    return keras.Sequential(layers + ([keras.layers.Dense(1, use_bias=False, name="new")] if extra else []))


_SAVED = _net(False)
_PATH = os.path.join(tempfile.mkdtemp(), "weights")
tf.train.Checkpoint(model=_SAVED).write(_PATH)  # write(): no save_counter in the file


def build_model():
    model = _net({extra})
    tf.train.Checkpoint(model=model).restore(_PATH).expect_partial()
    return model


if __name__ == "__main__":
    same = np.array_equal(build_model().layers[0].get_weights()[0], _SAVED.layers[0].get_weights()[0])
    print("restored" if same else "not restored")
"""


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_the_checkpoints_own_save_counter_is_no_model_variable(tmp_path, legacy):
    """Issue 29: restoring a file written by Checkpoint.write() makes the new Checkpoint's save_counter, which the file
    lacks; it is the Checkpoint's, not the model's: no MP304 (running it: the model's weights are restored). With
    one model variable really missing, the message is in the singular and names only it."""
    script = tmp_path / "written.py"
    script.write_text(WRITTEN.format(import_keras=KERAS[legacy], extra=False))
    truth = run_python(script, legacy=legacy)
    assert truth.stdout.strip().endswith("restored") and "not" not in truth.stdout, truth.stderr[-2000:]
    assert _mp304(trace_check(script, legacy=legacy)) == []
    script.write_text(WRITTEN.format(import_keras=KERAS[legacy], extra=True))
    [finding] = _mp304(trace_check(script, legacy=legacy))
    assert "1 variable got no value and keeps its initial value (" in finding.message
    assert "save_counter" not in finding.message and "new/kernel" in finding.message
