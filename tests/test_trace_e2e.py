"""The trace pass end to end: real model files run in the child under Keras 3 and tf_keras, compared with what
actually happens when the same scripts run."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("tensorflow")

from trace_support import (
    codes_at,
    make_float32_savedmodel,
    run_python,
    trace_check,
    write_overflowing_checkpoint,
)


@pytest.fixture(scope="module")
def savedmodel(tmp_path_factory):
    return make_float32_savedmodel(tmp_path_factory.mktemp("savedmodel"))


HUB_SEED = """\
    import tensorflow as tf
    import tensorflow_hub as hub

    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(3,)),
        hub.KerasLayer({handle!r}{dtype}),
        tf.keras.layers.Dense(2, dtype=tf.float32),
    ])
    model.build((None, 3))
    print(model(tf.ones([2, 3])).dtype)
    """


def test_first_seed_on_tf_keras_is_mp201_at_the_hub_layer_and_the_fix_works(tmp_path, savedmodel):
    broken = tmp_path / "seed.py"
    broken.write_text(textwrap.dedent(HUB_SEED.format(handle=str(savedmodel), dtype="")))
    assert run_python(broken, legacy=True).returncode != 0  # ground truth: it really fails

    diagnostics = trace_check(broken, legacy=True)
    [mp201] = [d for d in diagnostics if d.code == "MP201"]
    assert mp201.location.line == 7 and mp201.passes == ("static", "trace")
    assert "float16" in mp201.message and "float32" in mp201.message
    assert not [d for d in diagnostics if d.code == "MP001"], [d.message for d in diagnostics]

    fixed = tmp_path / "fixed.py"
    fixed.write_text(textwrap.dedent(HUB_SEED.format(handle=str(savedmodel), dtype=', dtype="float32"')))
    assert run_python(fixed, legacy=True).returncode == 0
    assert not [d for d in trace_check(fixed, legacy=True) if d.code in ("MP201", "MP001")]


TFSM = """\
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")
    inputs = keras.Input((3,))
    features = keras.layers.TFSMLayer({handle!r}, call_endpoint="serving_default"{dtype})(inputs)["output_0"]
    outputs = keras.layers.Dense(2, dtype="float32")(features)
    model = keras.Model(inputs, outputs)
    """


def test_keras3_tfsmlayer_builds_but_fails_when_run_mp201_and_fix(tmp_path, savedmodel):
    broken = tmp_path / "tfsm.py"
    broken.write_text(textwrap.dedent(TFSM.format(handle=str(savedmodel), dtype="")))
    diagnostics = trace_check(broken, legacy=False)
    assert ("MP201", 5) in codes_at(diagnostics)
    assert not [d for d in diagnostics if d.code == "MP001"], [d.message for d in diagnostics]

    fixed = tmp_path / "tfsm_fixed.py"
    fixed.write_text(textwrap.dedent(TFSM.format(handle=str(savedmodel), dtype=', dtype="float32"')))
    assert not [d for d in trace_check(fixed, legacy=False) if d.code in ("MP201", "MP001")]


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_float32_constant_in_custom_layer_is_one_mp406_at_the_constant(tmp_path, legacy):
    script = tmp_path / "scale.py"
    script.write_text(
        textwrap.dedent("""\
        import tensorflow as tf

        tf.keras.mixed_precision.set_global_policy("mixed_float16")


        class Scale(tf.keras.layers.Layer):
            def call(self, inputs):
                return inputs * tf.constant(2.0, dtype=tf.float32)


        def build_model():
            inputs = tf.keras.Input((4,))
            return tf.keras.Model(inputs, Scale()(tf.keras.layers.Dense(4)(inputs)))
        """)
    )
    diagnostics = trace_check(script, legacy=legacy)
    # the run confirms the static finding at the constant: one finding, not a second one on the class (issue 33)
    found = [(d.code, d.location.line) for d in diagnostics if d.code in ("MP406", "MP001")]
    assert found == [("MP406", 8)], [(d.code, d.location.line, d.message) for d in diagnostics]


def test_main_block_never_runs_and_unexplained_errors_are_mp001_at_the_user_line(tmp_path):
    canary = tmp_path / "trained.txt"
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(f"""\
        import keras

        def build_model():
            inputs = keras.Input((4,))
            x = keras.layers.Dense(8)(inputs)
            return keras.Model(inputs, keras.layers.Reshape((3, 3))(x))

        if __name__ == "__main__":
            open({str(canary)!r}, "w").write("trained")
        """)
    )
    diagnostics = trace_check(script, legacy=False)
    assert not canary.exists()
    [mp001] = [d for d in diagnostics if d.code == "MP001"]
    assert mp001.location.line == 6 and "ValueError" in mp001.message


def test_second_seed_tf1_restore_into_float16_is_mp301_at_the_saver(tmp_path, monkeypatch):
    from pathlib import Path

    source = (Path(__file__).parent / "fixtures" / "MP301" / "seed003_question_float16_saver_keras2.py").read_text()
    script = tmp_path / "seed003.py"
    script.write_text(source)
    monkeypatch.chdir(tmp_path)  # the script writes tmp.ckpt* next to where it runs
    assert run_python(script, legacy=True).returncode != 0  # ground truth: the restore really fails
    diagnostics = trace_check(script, legacy=True)
    [mp301] = [d for d in diagnostics if d.code == "MP301"]
    assert mp301.location.line == 29 and mp301.passes == ("static", "trace")
    assert "(3 float32 values for float16 variables: " in mp301.message and "and 2 more)" in mp301.message
    assert any("dense/kernel:0: checkpoint float32, variable float16" in note for note in mp301.notes), mp301.notes
    assert not [d for d in diagnostics if d.code == "MP001"], [d.message for d in diagnostics]


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_restored_checkpoint_values_beyond_float16_range_are_mp302(tmp_path, legacy, monkeypatch):
    ckpt = tmp_path / "big" / "ckpt"
    write_overflowing_checkpoint(ckpt)
    script = tmp_path / "restore.py"
    script.write_text(
        textwrap.dedent(f"""\
        import tensorflow as tf

        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        dense = tf.keras.layers.Dense(2)
        dense.build((None, 4))
        checkpoint = tf.train.Checkpoint(kernel=dense.kernel, bias=dense.bias)
        checkpoint.read({str(ckpt)!r}).expect_partial()
        print(dense(tf.ones([1, 4])))
        """)
    )
    found = [d for d in trace_check(script, legacy=legacy) if d.code in ("MP302", "MP303", "MP001")]
    assert [(d.code, d.location.line, d.location.layer) for d in found] == [
        ("MP302", 7, "kernel/.ATTRIBUTES/VARIABLE_VALUE")
    ], [d.message for d in found]
    assert "4 of 8 values" in found[0].message or "8 of 8 values" in found[0].message


def test_cli_checkpoint_option_audits_against_the_models_compute_dtype(tmp_path):
    import json
    import os
    import subprocess
    import sys

    ckpt = tmp_path / "ckpt"
    subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""\
        import numpy as np, tensorflow as tf
        tf.train.Checkpoint(w=tf.Variable(np.array([1e-12, 2e-12, 0.5], dtype=np.float32))).write({str(ckpt)!r})
        """),
        ],
        check=True,
        capture_output=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        timeout=300,
    )
    script = tmp_path / "model.py"

    def checkpoint_findings(layer: str) -> list:
        script.write_text(
            "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\n"
            f"model = keras.Sequential([keras.Input((4,)), {layer}])\n"
        )
        result = subprocess.run(
            [sys.executable, "-m", "mpdoctor", "check", "--trace", "--format", "json", "--checkpoint", str(ckpt)]
            + ["model.py"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        diagnostics = json.loads(result.stdout)["diagnostics"]
        return [(d["code"], d["layer"]) for d in diagnostics if d["code"].startswith("MP30")]

    # the checkpoint holds a bare `w`, not this model: MP304 says so; its tiny values flush in float16 (MP303)
    assert checkpoint_findings("keras.layers.Dense(2)") == [("MP303", "w/.ATTRIBUTES/VARIABLE_VALUE"), ("MP304", None)]
    # a model whose every layer computes in float32 is not range-audited as float16 (issue 14 item 4)
    assert checkpoint_findings("keras.layers.Dense(2, dtype='float32')") == [("MP304", None)]
    missing = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--trace", "--checkpoint", "nope/ckpt", "model.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode == 2 and missing.stderr.strip() == "mpdoctor: error: nope/ckpt: no such checkpoint"


def test_static_mp301_is_cleared_when_the_traced_restore_succeeds(tmp_path, monkeypatch):
    """The static pass cannot know the checkpoint's dtypes and flags a float16 graph restoring an unknown
    checkpoint; when the traced restore succeeds (the checkpoint was float16), the finding is withdrawn."""
    import os
    import subprocess
    import sys

    from mpdoctor.config import Config
    from mpdoctor.engine import check_source

    half = tmp_path / "half.ckpt"
    subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""\
        import tensorflow as tf
        tf.compat.v1.disable_eager_execution()
        a = tf.compat.v1.get_variable("a", shape=[2], dtype=tf.float16)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(sess, {str(half)!r})
        """),
        ],
        check=True,
        capture_output=True,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1"),
    )
    script = tmp_path / "restore_half.py"
    script.write_text(
        textwrap.dedent("""\
        import os

        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import tensorflow as tf

        tf.compat.v1.disable_eager_execution()
        with tf.Graph().as_default():
            b = tf.compat.v1.get_variable("a", shape=[2], dtype=tf.float16)
            reader = tf.compat.v1.train.Saver()
            with tf.compat.v1.Session() as sess:
                reader.restore(sess, os.environ["CKPT"])
        """)
    )
    monkeypatch.setenv("CKPT", str(half))
    assert run_python(script, legacy=True).returncode == 0
    static_only, _ = check_source(script.read_text(), script.name, Config())
    assert [(d.code, d.location.line) for d in static_only if d.code == "MP301"] == [("MP301", 9)]
    traced = trace_check(script, legacy=True)
    assert not [d for d in traced if d.code in ("MP301", "MP001")], [(d.code, d.message) for d in traced]


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_builder_like_functions_are_traced_and_data_loaders_are_not_called(tmp_path, legacy):
    """A script whose model is built only by `build()` (called under `__main__`, which the trace never runs): the
    trace calls `build()`, not `get_dataset()` (whose canary file must not appear)."""
    keras = "tf_keras as keras" if legacy else "keras"
    script = tmp_path / "script.py"
    canary = tmp_path / "canary"
    script.write_text(
        textwrap.dedent(f"""\
        import {keras}

        keras.mixed_precision.set_global_policy("mixed_float16")


        def get_dataset():
            open({str(canary)!r}, "w").close()


        def build():
            inputs = keras.Input((4,))
            return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(inputs))


        if __name__ == "__main__":
            build().fit(get_dataset())
        """)
    )
    found = [d for d in trace_check(script, legacy=legacy) if d.code == "MP401"]
    assert [(d.location.line, d.passes) for d in found] == [(12, ("static", "trace"))]
    assert not canary.exists()
