"""What a file's own code may say about its target (issue 29): an API a rule reports is never evidence for the target
that would silence the rule; real choices of environment still are. Fixtures in tests/fixtures/target_evidence/,
checked from a project that declares nothing, with TF 2.21 / Keras 3 / tf_keras installed (held fixed, as the
ground-truth runs at the end saw them)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mpdoctor.config import Config
from mpdoctor.engine import check_paths
from mpdoctor.project import environment, target
from mpdoctor.project.target import DECLARED, ENVIRONMENT, FILE, Overrides, target_for

FIXTURES = Path(__file__).parent / "fixtures" / "target_evidence"
GUIDE_NOTE = (
    "this file looks written for Keras 2 (get_scaled_loss, line 25) but tf.keras here is Keras 3; declare the "
    "target (requirements, pyproject) to be judged against it, or set TF_USE_LEGACY_KERAS=1 with tf_keras installed"
)


@pytest.fixture(autouse=True)
def installed(monkeypatch):
    """TF 2.21 with Keras 3 installed, TF_USE_LEGACY_KERAS unset, project files read afresh."""
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    monkeypatch.setattr(environment, "tensorflow_version", lambda: (2, 21))
    monkeypatch.setattr(environment, "standalone_keras_major", lambda: 3)
    target.new_run()


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A project root that declares nothing (its .git stops the search for declarations)."""
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def check(project: Path, *names: str) -> list[tuple[str, int, str, str]]:
    for name in names:
        shutil.copy(FIXTURES / name, project / name)
    report = check_paths([Path(n) for n in names], Config())
    assert not report.errors
    return sorted((Path(d.location.path).name, d.location.line, d.code, d.message) for d in report.diagnostics)


def resolve(project: Path, source: str, **overrides):
    path = project / "model.py"
    path.write_text(source)
    target.new_run()
    return target_for(str(path), ast.parse(source), source, Overrides(**overrides))


# ------------------------------------------------------------------------- the regression: the bug chose Keras 2


def test_get_scaled_loss_under_import_keras_is_reported_with_one_note(project):
    """keras3_get_scaled_loss.py: AttributeError on its first step under Keras 3 (test_ground_truth)."""
    found = check(project, "keras3_get_scaled_loss.py")
    assert [(line, code) for _, line, code, _ in found] == [(17, "MP003"), (17, "MP103"), (19, "MP103")]
    note = found[0][3]
    assert note.startswith("this file looks written for Keras 2 (get_scaled_loss, line 17) but keras here is Keras 3")
    assert "import tf_keras" in note  # TF_USE_LEGACY_KERAS does not change the keras package


def test_the_guides_custom_loop_is_reported_with_the_issues_words(project):
    """guide_custom_loop.py (tensorflow.org/guide/mixed_precision's loop): AttributeError on TF 2.21 where tf.keras is
    Keras 3; runs with TF_USE_LEGACY_KERAS=1 (test_ground_truth)."""
    found = check(project, "guide_custom_loop.py")
    assert [(line, code) for _, line, code, _ in found] == [(25, "MP003"), (25, "MP103"), (27, "MP103")]
    assert found[0][3] == GUIDE_NOTE


def test_show_target_never_cites_a_flagged_api_as_evidence(project):
    shutil.copy(FIXTURES / "guide_custom_loop.py", project / "guide.py")
    text = (project / "guide.py").read_text()
    t = target_for(str(project / "guide.py"), ast.parse(text), text)
    assert t.keras_major == 3 and t.keras_source == ENVIRONMENT and t.keras_certain
    lines = t.describe()
    keras_line = next(line for line in lines if line.startswith("  Keras:"))
    assert "get_scaled_loss" not in keras_line and "environment" in keras_line
    assert "the file's own evidence:" not in lines
    flagged = lines.index("  not evidence (APIs a rule reports on the other target, so they never choose it):")
    assert "get_scaled_loss" in lines[flagged + 1]
    assert lines[-1] == f"  note: {GUIDE_NOTE}"


def test_the_same_loop_on_a_chosen_keras2_is_clean(project, monkeypatch):
    """tf_keras_get_scaled_loss.py and legacy_env_guide_loop.py run (test_ground_truth): no finding, no note; nor
    the guide's loop with TF_USE_LEGACY_KERAS=1 in the environment, where it runs too."""
    assert check(project, "tf_keras_get_scaled_loss.py", "legacy_env_guide_loop.py") == []
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    target.new_run()
    assert check(project, "guide_custom_loop.py") == []


def test_declared_keras2_judges_the_loop_as_keras2_and_a_declared_range_of_both_stays_uncertain(project):
    (project / "requirements.txt").write_text("tensorflow==2.15.*\n")
    assert check(project, "guide_custom_loop.py") == []
    (project / "requirements.txt").write_text("tensorflow>=2.12\n")
    target.new_run()
    found = check(project, "guide_custom_loop.py")
    assert [(line, code) for _, line, code, _ in found] == [(25, "MP103"), (27, "MP103")]  # declared: no note
    assert all("Keras 2 or 3" in message for *_, message in found)


# ------------------------------------------------------------------------------ real choices still count


def test_environment_choices_in_the_file_still_decide(project):
    tf_keras = resolve(project, "import tf_keras as keras\nopt.get_scaled_loss(loss)\n")
    assert (
        tf_keras.keras_major == 2 and tf_keras.keras_origin == "this file imports tf_keras" and not tf_keras.conflicts
    )
    legacy = "import os\nos.environ['TF_USE_LEGACY_KERAS'] = '1'\nimport tensorflow as tf\nopt.get_scaled_loss(l)\n"
    t = resolve(project, legacy)
    assert t.keras_major == 2 and t.keras_source == FILE and not t.conflicts
    ops = resolve(project, "from tensorflow import keras\ny = keras.ops.softmax(x)\n")
    assert ops.keras_major == 3 and ops.keras_source == FILE


def test_tf1_code_throughout_is_a_tf1_target_but_tf1_loss_scaling_alone_is_not(project):
    graph = "import tensorflow as tf\nx = tf.placeholder(tf.float32)\nsess = tf.Session()\n"
    t = resolve(project, graph + "opt = tf.contrib.mixed_precision.LossScaleOptimizer(o, m)\n")
    assert t.tensorflow_source == FILE and all(r[0] == 1 for r in t.releases) and not t.conflicts
    alone = resolve(project, "import tensorflow as tf\nopt = tf.contrib.mixed_precision.LossScaleOptimizer(o, m)\n")
    assert alone.tensorflow_source == ENVIRONMENT and alone.releases == {(2, 21)}
    [note] = alone.conflicts
    assert note.note and "looks written for TensorFlow 1 (tf.contrib.mixed_precision, line 2)" in note.message


def test_flagged_api_in_a_compatibility_shim_is_no_hint(project):
    """A version test or an ImportError handler around the old API: the file runs on both (MP103 is silent)."""
    shim = (
        "import tensorflow as tf\n"
        "if tf.__version__ < '2.4':\n"
        "    tf.keras.mixed_precision.experimental.set_policy('mixed_float16')\n"
        "else:\n"
        "    tf.keras.mixed_precision.set_global_policy('mixed_float16')\n"
    )
    t = resolve(project, shim)
    assert t.clues == () and t.conflicts == ()


KERAS3_SHIM = (
    "import keras\n"
    "{test}\n"
    "    keras.config.set_dtype_policy('bfloat16')\n"
    "else:\n"
    "    keras.mixed_precision.set_global_policy('bfloat16')\n"
)


@pytest.mark.parametrize("test", ["if hasattr(keras, 'config'):", "if keras.__version__ >= '3':"])
def test_keras3_api_in_a_shim_says_nothing_against_a_keras2_pin(project, test):
    """keras-benchmarks (issue 29): `if hasattr(keras, "config"): keras.config... else: keras.mixed_precision...` runs
    on both Keras lines, so a TF 2.15 pin (Keras 2) is no mismatch; the same call outside a shim is one (MP003)."""
    (project / "requirements.txt").write_text("tensorflow==2.15.0.post1\n")
    t = resolve(project, KERAS3_SHIM.format(test=test))
    assert t.clues == () and t.conflicts == () and t.keras_major == 2
    try_shim = "import keras\ntry:\n    keras.config.set_dtype_policy('bfloat16')\nexcept AttributeError:\n    pass\n"
    assert resolve(project, try_shim).conflicts == ()
    [mismatch] = resolve(project, "import keras\nkeras.config.set_dtype_policy('bfloat16')\n").conflicts
    assert "(Keras 2 for this file) but this file uses `keras.config.set_dtype_policy` (line 2)" in mismatch.message


def test_removed_experimental_api_notes_its_tensorflow_era(project):
    source = "import tensorflow as tf\ntf.keras.mixed_precision.experimental.set_policy('mixed_float16')\n"
    [note] = resolve(project, source).conflicts
    assert note.message.startswith(
        "this file looks written for TensorFlow < 2.9 (mixed_precision.experimental, line 2) but TensorFlow 2.21"
    )
    (project / "requirements.txt").write_text("tensorflow==2.8\n")
    t = resolve(project, source)
    assert t.tensorflow_source == DECLARED and t.conflicts == ()


# ----------------------------------------------------------------------------------------------- ground truth

RUNS = [
    ("keras3_get_scaled_loss.py", {}, "AttributeError"),
    ("tf_keras_get_scaled_loss.py", {}, None),
    ("guide_custom_loop.py", {}, "AttributeError"),
    ("guide_custom_loop.py", {"TF_USE_LEGACY_KERAS": "1"}, None),
    ("legacy_env_guide_loop.py", {}, None),
]


@pytest.mark.parametrize(("name", "env", "error"), RUNS, ids=[f"{n}{'+legacy' if e else ''}" for n, e, _ in RUNS])
def test_ground_truth(tensorflow, name, env, error):
    """Each fixture run with the installed TensorFlow 2.21 (Keras 3, tf_keras): the Keras 2 API fails on Keras 3
    (AttributeError: 'LossScaleOptimizer' object has no attribute 'get_scaled_loss') and trains one step on tf_keras."""
    environ = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"} | env | {"CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run(
        [sys.executable, str(FIXTURES / name)], env=environ, capture_output=True, text=True, timeout=600
    )
    if error is None:
        assert run.returncode == 0, run.stderr[-2000:]
        float(run.stdout.strip().splitlines()[-1])  # the loss of one step
    else:
        assert run.returncode != 0 and error in run.stderr and "get_scaled_loss" in run.stderr


# ---------------------------------------------------------------------------- one project, one target

PROJECTS = Path(__file__).parent / "fixtures" / "projects"
LEGACY_LINE = 'os.environ["TF_USE_LEGACY_KERAS"] = "1"\n'


def unet_project(tmp_path: Path, legacy: bool = True) -> Path:
    project = shutil.copytree(PROJECTS / "legacy_unet", tmp_path / "legacy_unet")
    if not legacy:
        train = project / "train.py"
        train.write_text(train.read_text().replace(LEGACY_LINE, ""))
    return project


def mp406(project: Path, *paths: Path) -> list[tuple[str, int]]:
    report = check_paths(list(paths) or [project], Config())
    assert not report.errors
    return [(Path(d.location.path).name, d.location.line) for d in report.diagnostics if d.code == "MP406"]


def test_a_module_is_judged_under_the_keras_its_entry_point_chooses(tmp_path, monkeypatch):
    """legacy_unet: train.py sets TF_USE_LEGACY_KERAS=1 and imports models/unet.py, whose bilinear UpSampling2D then
    returns float32 (tf_keras, mixed_float16), so its tf.cast(skip, tf.float32) is what makes the concat work: no
    MP406, whether the project or the module alone is checked. Without the setting (Keras 3) the upsampled tensor is
    float16 and the concat fails: MP406 (test_ground_truth_unet)."""
    monkeypatch.chdir(tmp_path)
    project = unet_project(tmp_path)
    module = project / "models" / "unet.py"
    assert mp406(project) == [] and mp406(project, module) == []
    text = module.read_text()
    t = target_for(str(module), ast.parse(text), text, modules=_modules(module))
    assert t.keras_major == 2 and "train.py, which imports this module, sets TF_USE_LEGACY_KERAS=1" in t.keras_origin
    target.new_run()
    keras3 = unet_project(tmp_path / "k3", legacy=False)
    assert mp406(keras3) == [("unet.py", 17)]


def test_a_module_of_a_project_with_both_keras_lines_gets_no_fix_that_breaks_one(tmp_path, monkeypatch):
    """A declared range with Keras 2 and 3 and nothing else: the bilinear output is float32 on one, float16 on the
    other; no MP406 (its fix would break the Keras 2 part)."""
    monkeypatch.chdir(tmp_path)
    project = unet_project(tmp_path, legacy=False)
    (project / "requirements.txt").write_text("tensorflow>=2.12\n")
    assert mp406(project) == []


def test_a_script_nothing_imports_keeps_its_own_target(tmp_path, monkeypatch):
    """The entry point's choice reaches the modules it imports, not a sibling script it never imports."""
    monkeypatch.chdir(tmp_path)
    project = unet_project(tmp_path)
    other = project / "export.py"
    other.write_text("import tensorflow as tf\nmodel = tf.keras.Sequential()\n")
    assert _modules(other) is None
    assert _modules(project / "models" / "unet.py") is not None


def _modules(path: Path):
    from mpdoctor.engine import modules_keras

    target.new_run()
    return modules_keras(str(path), Config())


@pytest.mark.parametrize("legacy", [True, False], ids=["tf_keras", "keras3"])
def test_ground_truth_unet(tensorflow, tmp_path, legacy):
    """Running legacy_unet's train.py --probe: with TF_USE_LEGACY_KERAS=1 the model runs and returns float32; without
    it (Keras 3) the UpBlock's concat fails: "Tensors in list passed to 'values' of 'ConcatV2' Op have types
    [float16, float32] that don't all match"."""
    project = unet_project(tmp_path, legacy=legacy)
    environ = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"} | {"CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run(
        [sys.executable, "train.py", "--probe"], cwd=project, env=environ, capture_output=True, text=True, timeout=600
    )
    if legacy:
        assert run.returncode == 0 and run.stdout.split()[-1] == "float32", run.stderr[-2000:]
    else:
        assert run.returncode != 0 and "ConcatV2" in run.stderr and "float16, float32" in run.stderr


# ----------------------------------------------------------------------------- policies across modules

_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>MP\d{3}(?:\s*,\s*MP\d{3})*)")


def marked(project: Path, code: str) -> set[tuple[str, int]]:
    found = set()
    for path in sorted(project.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if (m := _EXPECT.search(line)) and code in m["codes"]:
                found.add((path.relative_to(project).as_posix(), number))
    return found


def reported(project: Path, code: str, paths: list[Path] | None = None) -> set[tuple[str, int]]:
    report = check_paths(paths or [project], Config())
    assert not report.errors
    return {
        (Path(d.location.path).resolve().relative_to(project.resolve()).as_posix(), d.location.line)
        for d in report.diagnostics
        if d.code == code
    }


def test_a_policy_that_is_a_constant_of_another_module_is_resolved(tmp_path, monkeypatch):
    """policy_constant: `keras.config.set_dtype_policy(benchmark.FLOAT_A100)` with FLOAT_A100 = "bfloat16" in the
    package's __init__ (and tf_keras's `set_global_policy(FLOAT_V100)` imported from it) is a pure policy: MP102, as
    with the literal; MIXED_A100 ("mixed_bfloat16") is not. Running --probe shows the first variable's dtype:
    bfloat16 (Keras 3), float16 (tf_keras) (test_ground_truth_policy_constant)."""
    project = shutil.copytree(PROJECTS / "policy_constant", tmp_path / "policy_constant")
    monkeypatch.chdir(tmp_path)
    assert (
        reported(project, "MP102")
        == marked(project, "MP102")
        == {
            ("benchmark/run.py", 15),
            ("benchmark/run_legacy.py", 15),
        }
    )
    assert reported(project, "MP102", [project / "benchmark" / "run.py"]) == {("benchmark/run.py", 15)}
    init = project / "benchmark" / "__init__.py"
    init.write_text(init.read_text().replace('FLOAT_A100 = "bfloat16"', 'FLOAT_A100 = "mixed_bfloat16"'))
    target.new_run()
    assert reported(project, "MP102") == {("benchmark/run_legacy.py", 15)}


@pytest.mark.parametrize(("module", "dtype"), [("benchmark.run", "bfloat16"), ("benchmark.run_legacy", "float16")])
def test_ground_truth_policy_constant(tensorflow, module, dtype):
    environ = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"} | {"CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run(
        [sys.executable, "-m", module, "--probe"],
        cwd=PROJECTS / "policy_constant",
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0 and run.stdout.split()[-1] == dtype, run.stderr[-2000:]


# ------------------------------------------------------------------- the order of calls; pretrained models

MP101_FIXTURES = Path(__file__).parent / "fixtures" / "MP101"
ORDER_RUNS = [
    ("policy_in_callee_after_caller_built_keras3.py", "float32"),
    ("policy_in_callee_after_caller_built_keras2.py", "float32"),
    ("policy_in_callee_builds_its_own_model_keras3.py", "bfloat16"),
]


@pytest.mark.parametrize(("name", "dtype"), ORDER_RUNS, ids=[n for n, _ in ORDER_RUNS])
def test_ground_truth_policy_set_in_a_callee(tensorflow, name, dtype):
    """MP101's fixtures of issue 29 (their markers are checked by tests/test_fixtures.py): fine_tune() sets
    mixed_bfloat16 after main() built the model it trains, which then computes in float32 (MP101); a fine_tune()
    that builds its own model after the policy computes in bfloat16 (no MP101)."""
    environ = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"} | {"CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run(
        [sys.executable, str(MP101_FIXTURES / name)], env=environ, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0 and run.stdout.split()[-1] == dtype, run.stderr[-2000:]


def test_ground_truth_a_keras_hub_model_takes_the_pure_policy(tensorflow):
    """MP102 on a preset fine-tuned under "bfloat16" (tests/fixtures/MP102/preset_then_fit_keras3.py): a keras-hub
    backbone, built as from_preset builds it (no dtype given), has bfloat16 variables under that policy."""
    pytest.importorskip("keras_hub")
    code = (
        "import keras, keras_hub\n"
        "keras.config.set_dtype_policy('bfloat16')\n"
        "b = keras_hub.models.BertBackbone(vocabulary_size=10, num_layers=1, num_heads=1, hidden_dim=4,"
        " intermediate_dim=8, max_sequence_length=8)\n"
        "print(sorted({v.dtype for v in b.weights}))\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"} | {"CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().splitlines()[-1] == "['bfloat16']", run.stderr[-2000:]


# ------------------------------------------------------------------------------ MP102's words and severity

MP102_FIXTURES = Path(__file__).parent / "fixtures" / "MP102"


def mp102(name: str):
    from mpdoctor.engine import check_source

    text = (MP102_FIXTURES / name).read_text()
    found, error = check_source(text, name, Config())
    assert error is None
    return [d for d in found if d.code == "MP102"]


def test_mp102_says_no_loss_scaling_only_where_there_is_none(tensorflow):
    """Ground truth (run below): under a pure float16 policy, compile keeps a plain optimizer (no LossScaleOptimizer)
    in tf_keras and Keras 3, so "(no loss scaling either)" is true unless the file wraps the optimizer itself; and
    bfloat16 needs no loss scaling."""
    [wrapped] = mp102("float16_with_loss_scale_optimizer_keras2.py")
    assert "no loss scaling" not in wrapped.message and "variables are stored in float16" in wrapped.message
    [plain] = mp102("float16_policy_fit_keras3.py")
    assert "(no loss scaling either)" in plain.message
    code = (
        "import sys, numpy as np\n"
        "keras = __import__(sys.argv[1])\n"
        "keras.mixed_precision.set_global_policy('float16')\n"
        "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])\n"
        "model.compile(optimizer='sgd', loss='mse')\n"
        "model.fit(np.zeros((8, 4)), np.zeros((8, 1)), epochs=1, verbose=0)\n"
        "print(type(model.optimizer).__name__)\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"} | {"CUDA_VISIBLE_DEVICES": ""}
    for keras in ("keras", "tf_keras"):
        run = subprocess.run(
            [sys.executable, "-c", code, keras], env=environ, capture_output=True, text=True, timeout=600
        )
        assert run.returncode == 0 and run.stdout.split()[-1] == "SGD", run.stderr[-2000:]


def test_mp102_is_a_note_for_pure_float16_with_loss_scaling_and_ipu_stochastic_rounding():
    [note] = mp102("ipu_stochastic_rounding_keras2.py")
    assert note.severity.value == "info" and note.fix is None
    assert "documented practice on Graphcore IPUs" in note.message


# ------------------------------------------------------------------------------ MP402 on inference only

INFERENCE = """\
import numpy as np
{import_keras}

keras.mixed_precision.set_global_policy("mixed_float16")
inputs = keras.Input((4,))
outputs = keras.layers.Dense(1)(keras.layers.Dense(8, activation="relu")(inputs))
model = keras.Model(inputs, outputs)
{use}
"""
PREDICT = 'print(model.predict(np.ones((2, 4), "float32"), verbose=0).dtype)'
TRAIN = 'model.compile(optimizer="adam", loss="mse")\nmodel.fit(np.ones((8, 4)), np.ones((8, 1)), epochs=1, verbose=0)'


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_mp402_is_silent_on_an_inference_only_script_and_stays_on_a_trained_model(tensorflow, tmp_path, legacy):
    """RULES.md: MP402 is about the loss and metrics computed on a float16 output. A script that only predicts has
    neither (running it prints float16: the output reaches only the caller); the same model compiled and fitted
    keeps MP402."""
    from trace_support import run_python, trace_check

    keras = "import tf_keras as keras" if legacy else "import keras"
    script = tmp_path / "infer.py"
    script.write_text(INFERENCE.format(import_keras=keras, use=PREDICT))
    truth = run_python(script, legacy=legacy)
    assert truth.returncode == 0 and truth.stdout.split()[-1] == "float16", truth.stderr[-2000:]
    assert [d for d in trace_check(script, legacy=legacy) if d.code == "MP402"] == []
    script.write_text(INFERENCE.format(import_keras=keras, use=TRAIN))
    # tf_keras's trace also sees the compiled loss compute in float16: MP503 then names that output instead
    [finding] = [d for d in trace_check(script, legacy=legacy) if d.code in ("MP402", "MP503")]
    assert "float16" in finding.message and "loss" in finding.message


# -------------------------------------------------------------------- a policy set last: no effect (info)


def test_a_policy_set_after_everything_is_an_info_that_says_it_has_no_effect(tmp_path, monkeypatch):
    """The notebook's last cell sets the policy after every model was built and used: MP101 at info, "the call has
    no effect"; the same call before the model is fitted stays a warning (the policy was meant for that model)."""
    import json

    monkeypatch.chdir(tmp_path)
    cells = [
        "import keras\nimport numpy as np",
        "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])",
        "model.compile(optimizer='adam', loss='mse')\nmodel.fit(np.zeros((8, 4)), np.zeros((8, 1)), verbose=0)",
        "keras.mixed_precision.set_global_policy('mixed_float16')",
    ]
    notebook = {
        "cells": [
            {"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None} for c in cells
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "last.ipynb").write_text(json.dumps(notebook))
    [finding] = [d for d in check_paths([Path("last.ipynb")], Config()).diagnostics if d.code == "MP101"]
    assert finding.severity.value == "info" and "the call has no effect" in finding.message
    assert finding.location.cell == 4
    cells[2], cells[3] = cells[3], cells[2]
    notebook["cells"] = [dict(notebook["cells"][0], source=c) for c in cells]
    (tmp_path / "last.ipynb").write_text(json.dumps(notebook))
    [finding] = [d for d in check_paths([Path("last.ipynb")], Config()).diagnostics if d.code == "MP101"]
    assert finding.severity.value == "warning" and "still compute in float32" in finding.message


@pytest.mark.parametrize("name", ["policy_last_word_no_effect_keras3.py", "policy_last_word_no_effect_keras2.py"])
def test_ground_truth_a_policy_set_last_changes_no_layer(tensorflow, name):
    """Run the fixture, then read the layer's compute dtype: float32 (the call changed nothing built)."""
    code = (MP101_FIXTURES / name).read_text() + "\nprint(model.layers[-1].compute_dtype)\n"
    environ = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"} | {"CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.split()[-1] == "float32", run.stderr[-2000:]


# --------------------------------------------------------- a builder handed to a tuner, in earlier cells

TUNER = """\
import keras
import keras_tuner as kt


def build_model(hp):
    model = keras.Sequential([
        keras.Input((4,)),
        keras.layers.Dense(hp.Int("units", 4, 8)),
        keras.layers.Dense(3, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model

{before}
tuner = kt.RandomSearch(build_model, objective="val_loss", max_trials=1)
tuner.search(x, y, validation_split=0.5, epochs=1)
best = tuner.get_best_models(1)[0]
{after}
"""
POLICY = 'keras.mixed_precision.set_global_policy("mixed_float16")'


def test_a_builder_a_tuner_calls_is_judged_under_the_policy_of_the_search(tmp_path, monkeypatch):
    """build(hp) runs when tuner.search calls it: a policy set in a later cell (or line) does not reach its layers
    (no MP401 on its softmax head); set before the search, it does (MP401). Keras Tuner is not installed here: the
    ground truth is test_ground_truth_a_builder_runs_under_the_policy_at_its_call (a search that calls build(hp))."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "late.py").write_text(TUNER.format(before="", after=POLICY))
    (tmp_path / "early.py").write_text(TUNER.format(before=POLICY, after=""))
    found = check_paths([Path("late.py"), Path("early.py")], Config()).diagnostics
    assert sorted((d.location.path, d.location.line) for d in found if d.code == "MP401") == [("early.py", 9)]


HYPERMODEL = """\
import keras
import keras_tuner as kt


class SimpleMLP(kt.HyperModel):
    def build(self, hp):
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])


{before}
hypermodel = SimpleMLP()
{after}
"""


def test_a_hypermodel_made_but_never_handed_to_a_tuner_keeps_the_policy_at_its_construction(tmp_path, monkeypatch):
    """deep-learning-with-python chapter 13 (issue 29): a HyperModel instance no tuner gets, then the last cell sets
    mixed_float16: nothing built it under that policy (no MP401); made after the policy call, it is judged under it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "late.py").write_text(HYPERMODEL.format(before="", after=POLICY))
    (tmp_path / "early.py").write_text(HYPERMODEL.format(before=POLICY, after=""))
    found = check_paths([Path("late.py"), Path("early.py")], Config()).diagnostics
    assert sorted((d.location.path, d.location.line) for d in found if d.code == "MP401") == [("early.py", 7)]


def test_ground_truth_a_builder_runs_under_the_policy_at_its_call(tensorflow):
    code = (
        "import keras\n"
        "def build_model(hp):\n"
        "    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation='softmax')])\n"
        "class Search:\n"
        "    def __init__(self, build):\n"
        "        self.build = build\n"
        "    def search(self):\n"
        "        self.model = self.build(None)\n"
        "tuner = Search(build_model)\n"
        "tuner.search()\n"
        "keras.mixed_precision.set_global_policy('mixed_float16')\n"
        "print(tuner.model.layers[-1].compute_dtype)\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"} | {"CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.split()[-1] == "float32", run.stderr[-2000:]
