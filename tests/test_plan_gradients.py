"""`mpdoctor plan` on training files (issue 16, "plan takes gradients into account"): MP504's custom loops, Keras 3 and
tf_keras, with and without a LossScaleOptimizer. Apart from test_plan.py so that the suite's workers (a file each)
share the load."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from mpdoctor.cli import main


def _plan(monkeypatch, capsys, legacy: bool, *args: str) -> tuple[int, str, str]:
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1" if legacy else "0")
    code = main(["plan", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


GRADIENTS = Path(__file__).parent / "data" / "gradients"  # MP504's custom loops (tests/test_rules_gradients.py)


@pytest.mark.parametrize(
    ("name", "legacy", "underflows"),
    [
        ("custom_loop_no_scaling_keras3.py", False, True),
        ("custom_loop_scaled_keras3.py", False, False),
        ("custom_loop_no_scaling_keras2.py", True, True),
        ("custom_loop_scaled_keras2.py", True, False),
    ],
)
def test_a_training_file_gets_its_gradients_planned(tmp_path, monkeypatch, capsys, name, legacy, underflows):
    """With --rtol 0.05 the loop's forward pass is fine in float16 (its tiny outputs are off by 1.8 %, which rtol 0.01
    would fix by keeping the output layer in float32); one training step's gradients flush to zero without loss
    scaling (test_rules_gradients.py runs the loop for real: the weights do not move). The plan says to scale the
    loss, and says nothing about gradients for the same loop with a LossScaleOptimizer."""
    path = tmp_path / name
    shutil.copy(GRADIENTS / name, path)
    code, out, err = _plan(monkeypatch, capsys, legacy, "--format", "json", "--rtol", "0.05", str(path))
    plan = json.loads(out)["models"][0]["plan"]
    gradients = plan["final"]["gradients"]
    assert gradients is not None and gradients["skipped"] is None, plan
    if underflows:
        assert code == 1, err
        assert gradients["loss_scaling"] == "none"
        assert "use loss scaling" in plan["gradient_advice"] and "100%" in plan["gradient_advice"], plan
    else:
        assert gradients["loss_scaling"] == "LossScaleOptimizer", gradients
        assert plan["gradient_advice"] is None, plan
    assert [layer["reason"] for layer in plan["layers"]] == [], plan["layers"]  # nothing to keep in float32


# Loss scaling is there but not enough: the output layer's tiny weights (forward error 16 % in float16: the plan
# keeps it in float32 for the outputs) make the gradients reaching `wide` ~1e-13, still 0 in float16 at 2**15.
STILL_FLUSHES = """\
    import numpy as np
    import tensorflow as tf
    import KERAS

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(512, activation="relu", name="wide"),
            keras.layers.Dense(64, kernel_initializer=keras.initializers.RandomNormal(stddev=1e-7), name="tiny"),
            keras.layers.Activation("linear", dtype="float32"),
        ]
    )
    loss_fn = keras.losses.MeanSquaredError()
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))


    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled = SCALE_LOSS
        grads = UNSCALE
        optimizer.apply_gradients(zip(grads, model.trainable_variables))


    if __name__ == "__main__":  # ground truth: does one step move `wide`'s weights?
        before = model.get_layer("wide").kernel.numpy()
        train_step(np.random.default_rng(0).random((2, 64)).astype("float32"), np.zeros((2, 64), "float32"))
        print("moved", bool(np.any(model.get_layer("wide").kernel.numpy() != before)))
    """


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_layers_whose_gradients_flush_despite_loss_scaling_join_the_plan(tmp_path, monkeypatch, capsys, legacy):
    from trace_support import run_python

    body = textwrap.dedent(STILL_FLUSHES).replace("KERAS", "tf_keras as keras" if legacy else "keras")
    if legacy:
        body = body.replace("SCALE_LOSS", "optimizer.get_scaled_loss(loss)").replace(
            "UNSCALE", "optimizer.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))"
        )
    else:
        body = body.replace("SCALE_LOSS", "optimizer.scale_loss(loss)").replace(
            "UNSCALE", "tape.gradient(scaled, model.trainable_variables)"
        )
    path = tmp_path / "loop.py"
    path.write_text(body)
    ground = run_python(path, legacy=legacy)
    assert ground.returncode == 0, ground.stderr[-2000:]
    assert ground.stdout.split()[-1] == "False", ground.stdout  # the step does not move `wide` despite loss scaling

    code, out, err = _plan(monkeypatch, capsys, legacy, "--format", "json", str(path))
    assert code == 1, err
    plan = json.loads(out)["models"][0]["plan"]
    reasons = {layer["name"]: layer["reason"] for layer in plan["layers"]}
    assert reasons == {"wide": "gradient", "tiny": "error"}, plan["layers"]
    gradients = plan["final"]["gradients"]
    assert gradients["loss_scaling"] == "LossScaleOptimizer" and gradients["loss_scale"] == 2**15, gradients
    assert sum(v["flushed"] for v in gradients["variables"]) == 0, gradients  # with the plan nothing flushes
    assert plan["gradient_advice"] is None and plan["final"]["passed"], plan
