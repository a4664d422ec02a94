"""Check, fix, run: real scripts that break under mixed precision are fixed by `mpdoctor check --fix` (verified by
re-tracing) and then really build and predict / restore."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from trace_support import make_float32_savedmodel, run_python

ROOT = Path(__file__).resolve().parent.parent


def mpdoctor(*args: str, cwd: Path, legacy: bool) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="3",
        TF_USE_LEGACY_KERAS="1" if legacy else "0",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    return subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )


PREDICT = """
import numpy as np  # noqa: E402
print("predicted", model.predict(np.zeros((2, 224, 224, 3), "float32"), verbose=0).dtype)
"""


@pytest.mark.parametrize("lambda_cast", [True, False], ids=["accepted-answer-lambda", "original-question"])
def test_first_seed_fixed_by_mpdoctor_builds_and_predicts_on_tf_keras(tmp_path, lambda_cast):
    shutil.copytree(ROOT / "examples" / "savedmodels", tmp_path / "savedmodels")
    source = (ROOT / "examples" / "hub_seed.py").read_text()
    if not lambda_cast:
        source = source.replace("    tf.keras.layers.Lambda(lambda x: tf.cast(x, tf.float32)),\n", "")
    script = tmp_path / "seed.py"
    script.write_text(source + PREDICT)
    broken = run_python(script, legacy=True)
    assert broken.returncode != 0 and "float16" in broken.stderr  # ground truth: it really fails

    result = mpdoctor("--fix", "seed.py", cwd=tmp_path, legacy=True)
    assert "Fixed" in result.stdout and "(verified)" in result.stdout, result.stdout + result.stderr
    fixed = script.read_text()
    assert "hub.KerasLayer(model_handle, trainable=do_fine_tuning, dtype=tf.float32)" in fixed
    assert ("tf.keras.layers.Lambda(lambda x: tf.cast(x, tf.float32))" in fixed) == lambda_cast

    ran = run_python(script, legacy=True)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "predicted float32" in ran.stdout

    again = mpdoctor("--fix", "seed.py", cwd=tmp_path, legacy=True)
    assert script.read_text() == fixed and "0 problems fixed" in again.stdout


TFSM = """\
import numpy as np
import keras

keras.mixed_precision.set_global_policy("mixed_float16")
inputs = keras.Input((3,))
features = keras.layers.TFSMLayer({handle!r}, call_endpoint="serving_default")(inputs)["output_0"]
outputs = keras.layers.Dense(2, dtype="float32")(features)
model = keras.Model(inputs, outputs)
print("predicted", model.predict(np.ones((2, 3), "float32"), verbose=0).dtype)
"""


def test_keras3_tfsmlayer_fixed_by_mpdoctor_predicts(tmp_path):
    savedmodel = make_float32_savedmodel(tmp_path)
    script = tmp_path / "tfsm.py"
    script.write_text(TFSM.format(handle=str(savedmodel)))
    broken = run_python(script, legacy=False)
    assert broken.returncode != 0  # builds, then fails at predict (float16 into a float32 signature)

    result = mpdoctor("--fix", "tfsm.py", cwd=tmp_path, legacy=False)
    assert "(verified)" in result.stdout, result.stdout + result.stderr
    assert 'call_endpoint="serving_default", dtype="float32")' in script.read_text()
    ran = run_python(script, legacy=False)
    assert ran.returncode == 0 and "predicted float32" in ran.stdout, ran.stderr[-2000:]


def test_second_seed_fixed_by_mpdoctor_restores(tmp_path):
    script = tmp_path / "seed003.py"
    shutil.copy(ROOT / "tests" / "fixtures" / "MP301" / "seed003_question_float16_saver_keras2.py", script)
    original = script.read_text()
    broken = run_python(script, legacy=True)
    assert broken.returncode != 0 and "expected dtype half does not equal original dtype float" in broken.stderr

    static_only = mpdoctor("--fix", "--no-trace", "seed003.py", cwd=tmp_path, legacy=True)
    assert script.read_text() == original  # unseen checkpoint dtypes: the static fix is unsafe
    assert "1 fixable with --unsafe-fixes." in static_only.stdout and "[*]" not in static_only.stdout

    result = mpdoctor("--fix", "seed003.py", cwd=tmp_path, legacy=True)  # the trace saw float32 values: safe
    assert "Fixed 1 problem in seed003.py (verified)" in result.stdout, result.stdout + result.stderr
    assert "builder=CastOnRestoreSaverBuilder()" in script.read_text()
    ran = run_python(script, legacy=True)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.count("[[") == 2  # the float32 values saved, then the float16 values restored


OUTPUTS = """\
import numpy as np
{imports}

keras.mixed_precision.set_global_policy("mixed_float16")
inputs = keras.Input((4,))
hidden = keras.layers.Dense(8, activation="relu")(inputs)
probs = keras.layers.Dense(3, activation="softmax", name="probs")(hidden)
score = keras.layers.Dense(1, name="score")(hidden)
model = keras.Model(inputs, [probs, score])
model.compile(optimizer="adam", loss=["categorical_crossentropy", "mse"])  # trained: MP402's loss and metrics apply
print("dtypes", *[o.dtype.name for o in model.predict(np.ones((2, 4), "float32"), verbose=0)])
"""


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_float16_outputs_mp401_mp402_fixed_by_mpdoctor_become_float32(tmp_path, legacy):
    imports = "import tf_keras as keras" if legacy else "import keras"
    script = tmp_path / "heads.py"
    script.write_text(OUTPUTS.format(imports=imports))
    assert "dtypes float16 float16" in run_python(script, legacy=legacy).stdout  # ground truth

    result = mpdoctor("--fix", "heads.py", cwd=tmp_path, legacy=legacy)
    assert "Fixed 2 problems in heads.py (verified)" in result.stdout, result.stdout + result.stderr
    fixed = script.read_text()
    assert 'activation="softmax", name="probs", dtype="float32")' in fixed  # MP401
    assert 'Dense(1, name="score", dtype="float32")' in fixed  # MP402 (trace-only)
    ran = run_python(script, legacy=legacy)
    assert ran.returncode == 0 and "dtypes float32 float32" in ran.stdout, ran.stderr[-2000:]


def test_a_fix_that_breaks_the_traced_run_is_not_applied(tmp_path):
    from mpdoctor.config import Config
    from mpdoctor.diagnostics import Diagnostic, Edit, Fix, Location, Severity
    from mpdoctor.engine import TraceOptions
    from mpdoctor.fix import files

    script = tmp_path / "model.py"
    script.write_text(
        textwrap.dedent("""\
        import keras

        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        """)
    )
    text = script.read_text()
    column = text.splitlines()[2].index("2)") + 1
    harmful = Diagnostic(
        "MP401",
        "pretend",
        Location("model.py", 3, column),
        Severity.ERROR,
        fix=Fix("a wrong fix", (Edit("model.py", 3, column, 3, column + 1, '2, dtype="no_such"'),)),
    )
    previous = os.environ.get("TF_USE_LEGACY_KERAS")
    os.environ["TF_USE_LEGACY_KERAS"] = "0"
    try:
        result = files.fix_file(script, "model.py", text, [harmful], Config(), TraceOptions(enabled=True), unsafe=False)
    finally:
        os.environ.pop("TF_USE_LEGACY_KERAS") if previous is None else os.environ.update(TF_USE_LEGACY_KERAS=previous)
    assert result.error and "re-tracing the fixed file" in result.error and "new MP001" in result.error
    assert not result.applied and [d.code for d, _ in result.not_applied] == ["MP401"]
    assert result.fixed == text and script.read_text() == text


MAKE_CHECKPOINT = """\
import sys
{imports}
import tensorflow as tf

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(3)])
tf.train.Checkpoint(model=model).write(sys.argv[1])
"""

RESTORE = """\
import numpy as np
import tensorflow as tf
{imports}

keras.mixed_precision.set_global_policy("float16")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(3, dtype="float32")])
tf.train.Checkpoint(model=model).read("pretrained/ckpt").assert_consumed()
print("restored", model.predict(np.ones((2, 4), "float32"), verbose=0).dtype)
"""


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_tf2_checkpoint_into_float16_variables_fixed_by_mpdoctor_restores(tmp_path, legacy):
    imports = "import tf_keras as keras" if legacy else "import keras"
    maker = tmp_path / "make.py"
    maker.write_text(MAKE_CHECKPOINT.format(imports=imports))
    subprocess.run(
        [sys.executable, str(maker), "pretrained/ckpt"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1" if legacy else "0"),
    )
    script = tmp_path / "restore.py"
    script.write_text(RESTORE.format(imports=imports))
    broken = run_python(script, legacy=legacy)
    assert broken.returncode != 0 and "expected dtype half does not equal original dtype float" in broken.stderr

    safe_only = mpdoctor("--fix", "restore.py", cwd=tmp_path, legacy=legacy)
    assert "0 problems fixed" in safe_only.stdout and "fixable with --unsafe-fixes" in safe_only.stdout
    result = mpdoctor("--fix", "--unsafe-fixes", "restore.py", cwd=tmp_path, legacy=legacy)
    assert "Fixed 1 problem in restore.py (verified)" in result.stdout, result.stdout + result.stderr
    assert 'set_global_policy("mixed_float16")' in script.read_text()
    ran = run_python(script, legacy=legacy)
    assert ran.returncode == 0 and "restored float32" in ran.stdout, ran.stderr[-2000:]


GRAPH_REWRITE = """\
import numpy as np
import keras
import tensorflow as tf

inputs = keras.Input((4,))
hidden = keras.layers.Dense(8, activation="relu")(inputs)
outputs = keras.layers.Dense(1)(hidden)
model = keras.Model(inputs, outputs)
optimizer = tf.train.experimental.enable_mixed_precision_graph_rewrite(keras.optimizers.Adam())
model.compile(optimizer=optimizer, loss="mse")
print("output", model.predict(np.ones((2, 4), "float32"), verbose=0).dtype)
"""


def test_graph_rewrite_fixed_in_verified_rounds_until_nothing_is_left(tmp_path):
    script = tmp_path / "rewrite.py"
    script.write_text(GRAPH_REWRITE)
    broken = run_python(script, legacy=False)
    assert broken.returncode != 0 and "AttributeError" in broken.stderr

    # round 1: the mixed policy and a LossScaleOptimizer (MP103); the re-trace then finds the float16 output
    # (MP402, trace-only), fixed and verified in round 2. check counted one fixable finding: --diff and --fix say
    # that one, and the one its fix uncovered apart (issue 33).
    checked = mpdoctor("rewrite.py", cwd=tmp_path, legacy=False)
    assert checked.stdout.splitlines()[-1].endswith(" 1 fixable with --unsafe-fixes."), checked.stdout
    diff = mpdoctor("--diff", "--unsafe-fixes", "rewrite.py", cwd=tmp_path, legacy=False)
    would = "Would fix 1 problem (a second round would fix 1 more that these fixes uncover)."
    assert diff.stderr.splitlines()[-1] == would, diff.stderr
    result = mpdoctor("--fix", "--unsafe-fixes", "rewrite.py", cwd=tmp_path, legacy=False)
    assert (
        "Fixed 1 problem in rewrite.py (verified); a second round fixed 1 more that the fixes uncovered."
        in result.stdout
    ), result.stdout + result.stderr
    fixed = script.read_text()
    assert 'keras.mixed_precision.set_global_policy("mixed_float16")' in fixed
    assert "optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())" in fixed
    assert 'outputs = keras.layers.Dense(1, dtype="float32")(hidden)' in fixed
    ran = run_python(script, legacy=False)
    assert ran.returncode == 0 and "output float32" in ran.stdout, ran.stderr[-2000:]

    again = mpdoctor("--fix", "--unsafe-fixes", "rewrite.py", cwd=tmp_path, legacy=False)
    assert script.read_text() == fixed and "0 problems fixed" in again.stdout


# Fixed outputs that need files the fixture only names (a TF Hub handle, a pretrained checkpoint): the e2e tests
# above run those fixes against real files instead.
NEEDS_FILES = {
    "hub_after_lambda_cast_keras2",
    "tfsm_after_lambda_cast_keras3",
    "load_weights_float16_keras2",
    "tf2_checkpoint_float16_policy_keras3",
}
# Fixed outputs for another Keras backend: tests/test_backend_fixes.py runs them there (this environment has no torch).
OTHER_BACKEND = {"torch_step_keras3", "torch_step_lso_keras3"}
RUNNABLE = [
    p
    for p in sorted((ROOT / "tests" / "fixes").glob("MP*/*.out.py"))
    if p.name[: -len(".out.py")] not in NEEDS_FILES | OTHER_BACKEND
]


@pytest.mark.parametrize("fixed", RUNNABLE, ids=lambda p: f"{p.parent.name}/{p.name[: -len('.out.py')]}")
def test_every_fixed_fixture_runs(fixed, tmp_path):
    script = tmp_path / fixed.name.replace(".out.py", ".py")
    shutil.copy(fixed, script)
    ran = run_python(script, legacy="_keras2" in fixed.name)
    assert ran.returncode == 0, ran.stderr[-2000:]
