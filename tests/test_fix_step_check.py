"""Behavioural verification of training fixes (issue 19): with the trace on, `check --fix` runs one step of the fixed
file's training step function and one float32 step (loss scale 1) from the same weights on the sample batch. A fix
whose update agrees (cosine > 0.95, norm ratio 0.5-2) is applied and called verified by a training step; one that
does not is not applied, with the ratio, and the file is left as it was.

The wrong rewrite comes from tests/fix_steps/: a tape wrapper spelled like Horovod's DistributedGradientTape (which
the static pass trusts to be linear) that clips. One mpdoctor run fixes the four files (both Keras versions: each
file's target and its own TF_USE_LEGACY_KERAS pick the Keras its trace runs). --no-numerics keeps the traces short:
the step check builds its sample batch all the same."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mpdoctor.diagnostics import Diagnostic, Edit, Fix, Location, Severity
from mpdoctor.facts.schema import StepCheckRecord
from mpdoctor.fix.step import StepComparison, _times, step_function

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FILES = {
    "good_keras3.py": TESTS / "fixes" / "MP501" / "horovod_tape_keras3.in.py",
    "good_keras2.py": TESTS / "fixes" / "MP501" / "clip_by_global_norm_keras2.in.py",
    "bad_keras3.py": TESTS / "fix_steps" / "nonlinear_tape_keras3.py",
    "bad_keras2.py": TESTS / "fix_steps" / "nonlinear_tape_keras2.py",
    "dropout_keras3.py": TESTS / "fix_steps" / "dropout_step_keras3.py",
    "random_keras3.py": TESTS / "fix_steps" / "generator_noise_keras3.py",
}


@pytest.fixture(scope="module")
def fixed(tmp_path_factory, tensorflow):
    folder = tmp_path_factory.mktemp("step-check")
    shutil.copy(TESTS / "requirements.txt", folder / "requirements.txt")  # the fixtures' TensorFlow 2.21 target
    for name, source in FILES.items():
        shutil.copy(source, folder / name)
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    env.pop("TF_USE_LEGACY_KERAS", None)
    done = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--fix", "--unsafe-fixes", "--no-numerics", *FILES],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,
        timeout=900,
    )
    return folder, done


@pytest.mark.parametrize("keras", ["keras3", "keras2"])
def test_a_fix_whose_step_trains_like_float32_is_applied_and_verified_by_it(fixed, keras):
    folder, done = fixed
    name = f"good_{keras}.py"
    expected = FILES[name].with_name(FILES[name].name.replace(".in.py", ".out.py")).read_text(encoding="utf-8")
    assert (folder / name).read_text(encoding="utf-8") == expected, done.stdout + done.stderr
    assert f"Fixed 1 problem in {name} (verified by a training step)." in done.stdout, done.stdout


@pytest.mark.parametrize("keras", ["keras3", "keras2"])
def test_a_fix_whose_step_does_not_train_is_not_applied_and_says_why(fixed, keras):
    folder, done = fixed
    name = f"bad_{keras}.py"
    assert (folder / name).read_bytes() == FILES[name].read_bytes()  # untouched
    found = re.search(
        rf"{name}:\d+: MP501 fix not applied: the fixed step updates weights (\S+)x the float32 step", done.stdout
    )
    assert found, done.stdout + done.stderr
    assert float(found.group(1)) < 0.01  # the wrapper clips the scaled gradients: training would silently stop
    assert done.returncode == 1  # the bad files' MP501 findings remain


def test_a_random_step_is_not_judged_and_its_fix_is_applied_as_re_traced(fixed):
    folder, done = fixed
    assert "scale_loss" in (folder / "random_keras3.py").read_text(encoding="utf-8")
    assert (
        "Fixed 1 problem in random_keras3.py (the trace re-ran; the training step was not compared with float32: "
        "`train_step`: two float32 steps from the same weights differ (the step draws random numbers))."
    ) in " ".join(done.stdout.split()), done.stdout


def test_dropout_is_turned_off_for_the_comparison(fixed):
    # float16 and float32 inputs draw different dropout masks (issue 30): the check compares the step without them
    folder, done = fixed
    assert "scale_loss" in (folder / "dropout_keras3.py").read_text(encoding="utf-8")
    assert "Fixed 1 problem in dropout_keras3.py (verified by a training step)." in done.stdout, done.stdout


def test_the_comparison_wording():
    def record(**values):
        return StepCheckRecord(function="train_step", **values)

    assert StepComparison.of("train_step", record(cosine=0.999, norm_ratio=1.01), None).agrees
    # A right step on a CPU whose float16 kernels round more (CI's, k2_grad_accumulation_no_scaling) still agrees;
    # gradients lost to float16 (k3_tiny_loss_no_scaling's truth) do not.
    assert StepComparison.of("train_step", record(cosine=0.9895, norm_ratio=1.056), None).agrees
    assert "cosine 0.76" in StepComparison.of("train_step", record(cosine=0.7595, norm_ratio=0.7597), None).problem
    small = StepComparison.of("train_step", record(cosine=0.999, norm_ratio=3.1e-5), None)
    assert small.problem == "the fixed step updates weights 3.1e-5x the float32 step" and not small.agrees
    assert "3.3e4x" in StepComparison.of("train_step", record(cosine=1.0, norm_ratio=32768.0), None).problem
    turned = StepComparison.of("train_step", record(cosine=0.5, norm_ratio=1.0), None)
    assert turned.problem == "the fixed step moves the weights another way than the float32 step (cosine 0.50)"
    assert "does not move" in StepComparison.of("train_step", record(cosine=0.0, norm_ratio=0.0), None).problem
    random = StepComparison.of("train_step", record(skipped="two float32 steps differ"), None)
    assert not random.agrees and random.problem is None and "differ" in random.unchecked
    assert StepComparison.of(None, None, "not in a function").unchecked == "not in a function"
    assert _times(0.31) == "0.31" and _times(2.4e-4) == "2.4e-4"


def test_the_step_is_the_module_level_function_holding_the_fix():
    text = "import tf\n\n\n@tf.function\ndef train_step(x, y):\n    return x\n\n\nfor i in range(2):\n    pass\n"

    def at(line: int) -> Diagnostic:
        edit = Edit("f.py", line, 1, line, 1, "")
        fix = Fix("scale", (edit,), "unsafe", changes_training=True)
        return Diagnostic("MP501", "m", Location("f.py", line), Severity.ERROR, fix=fix)

    assert step_function(text, [(at(6), text)]) == ("train_step", None)
    assert step_function(text, [(at(4), text)]) == ("train_step", None)  # the decorator's line
    name, why = step_function(text, [(at(10), text)])
    assert name is None and "module-level function" in why
    loop = "def train(epochs=10):\n    for i in range(epochs):\n        pass\n"
    name, why = step_function(loop, [(at(2), loop)])
    assert name is None and why == "`train` does not take (inputs, labels) as a training step does"


def test_the_step_of_fixes_in_a_trainer_class_is_its_method_that_calls_the_others():
    text = (
        "class Trainer:\n"  # 1
        "    def _backprop(self, tape, scaled):\n"  # 2
        "        return tape\n"  # 3
        "\n"  # 4
        "    def train_step(self, x, y):\n"  # 5
        "        self._backprop(x, y)\n"  # 6
        "\n"  # 7
        "\n"  # 8
        "def train_step(images):\n"  # 9
        "    return images\n"  # 10
        "\n"  # 11
        "\n"  # 12
        "def train(dataset):\n"  # 13
        "    return dataset\n"  # 14
    )

    def at(line: int) -> tuple[Diagnostic, str]:
        edit = Edit("f.py", line, 1, line, 1, "")
        fix = Fix("scale", (edit,), "unsafe", changes_training=True)
        return Diagnostic("MP501", "m", Location("f.py", line), Severity.ERROR, fix=fix), text

    # a scale/unscale pair split over two methods: the step is the one calling the other
    assert step_function(text, [at(3), at(6)]) == ("Trainer.train_step", None)
    assert step_function(text, [at(6)]) == ("Trainer.train_step", None)
    assert step_function(text, [at(10)]) == ("train_step", None)  # a GAN's step takes the images alone
    name, why = step_function(text, [at(14)])  # one argument, not named as a step: not called with a batch
    assert name is None and "does not take" in why
    name, why = step_function(text, [at(3), at(10)])  # a method and a function: no one step
    assert name is None and "more than one function" in why
