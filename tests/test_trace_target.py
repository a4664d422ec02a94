"""The trace runs under the file's target where it can: a Keras 2 target is traced under tf_keras (the graph says so),
trace findings observed on a TensorFlow outside the target say so, and a crash on an API the installed TensorFlow
lacks but the target has is MP003 "cannot trace" at info, not an MP001 error in the user's code."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from trace_support import run_python, trace_check

from mpdoctor.project import target

FLOAT16_OUTPUT = """\
    import tensorflow as tf

    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    inputs = tf.keras.Input((4,))
    outputs = tf.keras.layers.Dense(3)(inputs)
    model = tf.keras.Model(inputs, outputs)
    """


@pytest.fixture(autouse=True)
def in_the_project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # origins are shown relative to the current directory


def project(tmp_path, requirements: str, source: str):
    (tmp_path / ".git").mkdir(exist_ok=True)
    (tmp_path / "requirements.txt").write_text(requirements)
    script = tmp_path / "model.py"
    script.write_text(textwrap.dedent(source))
    target.new_run()
    return script


def test_a_keras2_target_is_traced_under_tf_keras(tmp_path):
    script = project(tmp_path, "tensorflow>=2.12,<2.16\n", FLOAT16_OUTPUT)
    summaries: list = []
    diagnostics = trace_check(script, legacy=False, summaries=summaries)  # the environment says Keras 3...
    [summary] = summaries
    assert summary.environment.legacy_keras and summary.environment.keras_major == 2  # ...the target wins
    assert {m.graph.flavour for m in summary.models} == {"tf_keras"}
    # MP402 is trace-only: observed on TF 2.21, which is outside the target range, and it says so.
    [mp402] = [d for d in diagnostics if d.code == "MP402"]
    assert "(observed on TensorFlow 2.21; target: TensorFlow >=2.12,<2.16 from requirements.txt:1" in mp402.message
    assert not [d for d in diagnostics if d.code in ("MP001", "MP003")], [d.message for d in diagnostics]


KERAS3_CODE = FLOAT16_OUTPUT.replace(
    "outputs = tf.keras.layers.Dense(3)(inputs)", "outputs = tf.keras.layers.Dense(3)(tf.keras.ops.relu(inputs))"
)


def test_a_keras3_target_is_traced_under_keras3_without_the_note(tmp_path):
    """TF_USE_LEGACY_KERAS=1 in the environment makes tf.keras tf_keras on TF >= 2.16 (the pin leaves that open), but
    code that uses keras.ops is Keras 3 code: it is traced under Keras 3."""
    script = project(tmp_path, "tensorflow>=2.16\n", KERAS3_CODE)
    summaries: list = []
    diagnostics = trace_check(script, legacy=True, summaries=summaries)  # the environment says tf_keras...
    [summary] = summaries
    assert not summary.environment.legacy_keras and summary.environment.keras_major == 3  # ...the code wins
    assert {m.graph.flavour for m in summary.models} == {"keras3"}
    [mp402] = [d for d in diagnostics if d.code == "MP402"]
    assert "observed on" not in mp402.message  # TF 2.21 is in the target range


EXPERIMENTAL_API = """\
    import tensorflow as tf
    from tensorflow.keras.mixed_precision import experimental as mixed_precision

    mixed_precision.set_policy("mixed_float16")
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3, dtype="float32")])
    """


def test_an_api_the_installed_tensorflow_lacks_but_the_target_has_is_cannot_trace(tmp_path):
    script = project(tmp_path, "tensorflow==2.8.*\n", EXPERIMENTAL_API)
    assert "ImportError" in run_python(script, legacy=True).stderr  # ground truth: TF 2.21 / tf_keras lack it
    diagnostics = trace_check(script, legacy=False)
    codes = [(d.code, d.severity.value) for d in diagnostics]
    assert ("MP003", "info") in codes and "MP001" not in [c for c, _ in codes] and "MP103" not in [c for c, _ in codes]
    [mp003] = [d for d in diagnostics if d.code == "MP003"]
    assert mp003.message.startswith("cannot trace: the installed TensorFlow 2.21 lacks `keras.mixed_precision.")
    assert "TensorFlow ==2.8.* from requirements.txt:1" in mp003.message


def test_the_same_crash_on_a_target_without_the_api_stays_an_error(tmp_path):
    """Pinned to TF >= 2.9, where the experimental API is gone too: MP103 says so (and absorbs the crash)."""
    script = project(tmp_path, "tensorflow>=2.9,<2.16\n", EXPERIMENTAL_API)
    codes = {d.code for d in trace_check(script, legacy=False)}
    assert "MP103" in codes and "MP003" not in codes and "MP001" not in codes


TF1_CONTRIB = """\
    import tensorflow as tf

    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    hparams = tf.contrib.training.HParams(learning_rate=0.1)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3, dtype="float32")])
    """


def test_tf1_code_on_tf2_is_cannot_trace_and_a_real_bug_is_mp001(tmp_path):
    script = project(tmp_path, "tensorflow==1.15.5\n", TF1_CONTRIB)
    assert "AttributeError" in run_python(script, legacy=False).stderr
    diagnostics = trace_check(script, legacy=False)
    [mp003] = [d for d in diagnostics if d.code == "MP003"]
    assert "lacks `tf.contrib`" in mp003.message and mp003.location.line == 4
    assert not [d for d in diagnostics if d.code == "MP001"]
    # Pinned to TF 2 (where tf.contrib never exists), the crash is the code's: MP001, and MP003 for the pin.
    script = project(tmp_path, "tensorflow>=2.16\n", TF1_CONTRIB)
    codes = {(d.code, d.location.line) for d in trace_check(script, legacy=False)}
    assert ("MP001", 4) in codes and ("MP003", 4) in codes


GUIDE_LOOP = Path(__file__).parent / "fixtures" / "target_evidence" / "guide_custom_loop.py"


def test_a_keras2_loop_crashing_at_its_callers_line_is_one_mp103_not_also_mp001(tmp_path):
    """The mixed precision guide's custom loop on Keras 3 (issue 29): `optimizer.get_scaled_loss` inside a
    `tf.function` raises AttributeError at the call of `train_step` (line 34), not on line 25. One root cause, one
    finding: MP103 on the calls, no MP001 beside them."""
    (tmp_path / ".git").mkdir()
    script = tmp_path / GUIDE_LOOP.name
    shutil.copy(GUIDE_LOOP, script)
    target.new_run()
    stderr = run_python(script, legacy=False).stderr
    assert "has no attribute 'get_scaled_loss'" in stderr  # ground truth: Keras 3 fails there
    diagnostics = trace_check(script, legacy=False)
    assert sorted((d.code, d.location.line) for d in diagnostics if d.code in ("MP001", "MP103")) == [
        ("MP103", 25),
        ("MP103", 27),
    ], [d.message for d in diagnostics]


def test_a_crash_the_mp103_api_did_not_cause_stays_mp001(tmp_path):
    """The same file with the loop never called and another AttributeError: that crash is reported."""
    (tmp_path / ".git").mkdir()
    script = tmp_path / GUIDE_LOOP.name
    source = GUIDE_LOOP.read_text().replace(
        "print(float(train_step(x_train, y_train)))", "layer = tf.keras.layers.NoSuchLayer()"
    )
    script.write_text(source)
    target.new_run()
    assert "NoSuchLayer" in run_python(script, legacy=False).stderr
    codes = [(d.code, d.location.line) for d in trace_check(script, legacy=False)]
    assert ("MP001", 34) in codes and ("MP103", 25) in codes, codes
