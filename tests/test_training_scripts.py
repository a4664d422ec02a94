"""The training-step check against the truth of real training (issue 30), over the kept set of training scripts in
tests/data/training_scripts/ (as users write them: module-level models, builders, trainer classes, closures, GANs,
accumulation, clipping, MirroredStrategy, fit; Keras 3 and tf_keras). Each script's truth in expected.toml was
recorded by running its own step for several steps under its policy and under float32 (bench/training_steps.py
--record). The step check must run the step the script trains (not another instance of its model) and say what the
truth says: trains like float32 or not; a step that raises is not judged.

A representative few run in the normal suite; the whole set is slow. bench/training_steps.py prints the table."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from mpdoctor.fix.step import trains_like_float32

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SET = TESTS / "data" / "training_scripts"
with open(SET / "expected.toml", "rb") as _handle:
    MANIFEST = tomllib.load(_handle)
# One of each layout the issue names as broken before: module-level model (Keras 3), trainer object (tf_keras), GAN.
REPRESENTATIVE = ("k3_module_model_scaled", "k2_trainer_class", "k3_gan_two_optimizers")


def _scripts() -> list:
    return [
        pytest.param(name, marks=() if name in REPRESENTATIVE else (pytest.mark.slow,), id=name) for name in MANIFEST
    ]


def step_check(path: Path, function: str):
    from mpdoctor.config import Config
    from mpdoctor.engine import TraceOptions, check_source
    from mpdoctor.facts.trace_request import NumericsRequest, StepCheckRequest

    traces: list = []
    options = TraceOptions(enabled=True, numerics=NumericsRequest(enabled=False), step_check=StepCheckRequest(function))
    check_source(path.read_text(encoding="utf-8"), path.name, Config(), path=str(path), trace=options, traces=traces)
    assert traces, "the trace did not run"
    return traces[0].step_check


def test_the_kept_set_is_complete_and_recorded():
    assert len(MANIFEST) >= 20
    for name, spec in MANIFEST.items():
        assert (SET / f"{name}.py").is_file(), name
        assert "truth_agrees" in spec and "truth_mixed" in spec, f"{name}: truth not recorded"
    both_lines = {spec["keras"] for spec in MANIFEST.values()}
    assert both_lines == {2, 3}


@pytest.mark.parametrize("name", _scripts())
def test_the_step_check_runs_the_scripts_step_and_agrees_with_its_truth(name, tensorflow):
    spec = MANIFEST[name]
    record = step_check(SET / f"{name}.py", spec["step"])
    assert record is not None
    if spec["truth_mixed"].startswith("raises"):  # the script's own step fails: nothing is claimed either way
        assert record.skipped and "could not be run" in record.skipped, record
        return
    assert record.skipped is None, record.skipped
    says = trains_like_float32(record.cosine, record.norm_ratio)
    assert says == spec["truth_agrees"], (record, spec)


def test_a_keras2_api_step_on_a_module_level_model_is_fixed_and_verified_by_its_own_step(tmp_path, tensorflow):
    # The common layout: `model = build_model()` at module level, a step using that global. The step check
    # used to compare the builder's fresh instance ("Cond.call()" on Keras 3) and write the fix as not compared.
    name = "k3_keras2_api_on_keras3.py"
    shutil.copy(SET / name, tmp_path / name)
    shutil.copy(TESTS / "requirements.txt", tmp_path / "requirements.txt")  # the TensorFlow 2.21 target
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    env.pop("TF_USE_LEGACY_KERAS", None)
    done = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--fix", "--unsafe-fixes", name],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert f"in {name} (verified by a training step)" in done.stdout, done.stdout + done.stderr
    fixed = (tmp_path / name).read_text(encoding="utf-8")
    assert "optimizer.scale_loss(loss)" in fixed and "optimizer.get_scaled_loss(" not in fixed


AUGMENTING_STEP = """\
import keras
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential(
    [
        keras.Input((8, 8, 1)),
        keras.layers.RandomFlip("horizontal"),
        keras.layers.RandomTranslation(0.2, 0.2),
        keras.layers.Conv2D(4, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(3, dtype="float32"),
    ]
)
loss_fn = keras.losses.MeanSquaredError()
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
"""


def test_the_step_check_runs_augmentation_layers_in_inference_mode_and_compares_the_step(tmp_path, tensorflow):
    # RandomFlip / RandomTranslation draw anew on every call: found as MP504's step finds random layers (the float32
    # step from two seeds), they run in inference mode and the correctly scaled step is compared (it was "two float32
    # steps from the same weights differ" when only dropout and noise layers were turned off, by class).
    path = tmp_path / "augmenting_step.py"
    path.write_text(AUGMENTING_STEP, encoding="utf-8")
    record = step_check(path, "train_step")
    assert record is not None and record.skipped is None, record
    assert trains_like_float32(record.cosine, record.norm_ratio), record
