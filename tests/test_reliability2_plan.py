"""Issue 32 item 18: `mpdoctor plan` (and the numerics behind MP405) must not blame float16 for a random layer's
noise. Every forward pass starts from the same seed (a layer drawing tf.random.* / keras.random.* in inference mode
draws the same numbers in float16 and float32, rounded); a float32 reference that does not repeat itself with the
same seed (a tf.random.Generator) gives no plan and says why; the plan is the same on every run."""

from __future__ import annotations

import json
import textwrap

import pytest

pytest.importorskip("tensorflow")

from mpdoctor.cli import main

# The reproduction's model (../shared/repros/reliability-2/18_plan_nondeterministic.sh) with Keras's own random
# layers besides: Dropout and GaussianNoise are the identity in inference mode, Noisy draws tf.random.normal.
SEEDED_NOISE = """\
    import KERAS
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_float16")


    class Noisy(keras.layers.Layer):
        def call(self, x):
            return x + tf.random.normal(tf.shape(x), dtype=x.dtype)


    inputs = keras.Input((4,))
    x = keras.layers.Dense(8)(inputs)
    x = keras.layers.Dropout(0.5)(x)
    x = keras.layers.GaussianNoise(1.0)(x)
    outputs = keras.layers.Dense(3, activation="softmax")(Noisy()(x))
    model = keras.Model(inputs, outputs)
    """

# A generator with its own state: two float32 runs with the same global seed draw different numbers.
UNSEEDED_NOISE = """\
    import KERAS
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_float16")


    class Jitter(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.generator = tf.random.Generator.from_non_deterministic_state()

        def call(self, x):
            return x + tf.cast(self.generator.normal(tf.shape(x)), x.dtype)


    inputs = keras.Input((4,))
    x = Jitter()(keras.layers.Dense(8)(inputs))
    model = keras.Model(inputs, keras.layers.Dense(3, dtype="float32")(x))
    """


def _write(tmp_path, body: str, legacy: bool):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(body).replace("KERAS", "tf_keras as keras" if legacy else "keras"))
    return path


def _run(monkeypatch, capsys, legacy: bool, *args: str) -> tuple[int, str]:
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1" if legacy else "0")
    code = main([*args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_R18_a_model_drawing_random_numbers_gets_the_same_plan_on_every_run(tmp_path, monkeypatch, capsys, legacy):
    path = _write(tmp_path, SEEDED_NOISE, legacy)
    answers = []
    for _ in range(3):
        code, out = _run(monkeypatch, capsys, legacy, "plan", "--format", "json", str(path))
        plan = json.loads(out[out.index("{") :])["models"][0]["plan"]
        answers.append((code, plan["skipped"], [(layer["name"], layer["reason"]) for layer in plan["layers"]]))
        notes = plan["notes"]
    assert answers[0] == answers[1] == answers[2], answers
    code, skipped, layers = answers[0]
    # Only the softmax head (MP401's seed): the noise is not taken for a float16 error, Noisy is not kept
    assert skipped is None and [reason for _, reason in layers] == ["output-activation"], answers
    assert any("draws random numbers in inference mode" in note and "`noisy`" in note for note in notes), notes


def test_R18_a_reference_that_does_not_repeat_itself_gives_no_plan_and_says_why(tmp_path, monkeypatch, capsys):
    path = _write(tmp_path, UNSEEDED_NOISE, legacy=False)
    code, out = _run(monkeypatch, capsys, False, "plan", str(path))
    assert code == 1, out
    assert "no plan: the float32 reference is not repeatable: layer `jitter` (Jitter) draws random numbers" in out
    assert "keep" not in out and "verified" not in out, out
    # check's numerics neither: no MP405 for the jitter's noise
    code, out = _run(monkeypatch, capsys, False, "check", "--no-cache", str(path))
    assert "MP405" not in out, out
