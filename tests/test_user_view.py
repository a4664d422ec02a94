"""What a user sees, end to end through the command line: a clean file gets a clean result on this machine, opt-in
MP603, `--version`, and the trace's messages in the user's terms (paths as the code wrote them, `--assume-policy`).
The trace tests run real scripts in the child, in Keras 3 and tf_keras."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

KERAS3_CLEAN = """\
import keras
from keras import layers

keras.mixed_precision.set_global_policy("mixed_float16")


def build_model():
    inputs = keras.Input(shape=(32,))
    x = layers.Dense(64, activation="relu")(inputs)
    x = layers.Dense(10)(x)
    outputs = layers.Activation("softmax", dtype="float32")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model
"""
TF_KERAS_CLEAN = KERAS3_CLEAN.replace(
    "import keras\nfrom keras import layers", "import tf_keras as keras\nlayers = keras.layers"
)
# Mixed precision only through one layer's dtype= argument: no global policy.
KERAS3_LAYER_DTYPE = """\
import keras

model = keras.Sequential([
    keras.Input((32,)),
    keras.layers.Dense(64, activation="relu", dtype="mixed_float16"),
    keras.layers.Dense(10, activation="softmax"),
])
"""
TF_KERAS_LAYER_DTYPE = KERAS3_LAYER_DTYPE.replace("import keras", "import tf_keras as keras")


def mpdoctor(*args: str, cwd: Path, legacy: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TF_USE_LEGACY_KERAS")}
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        TF_CPP_MIN_LOG_LEVEL="3",
        TF_USE_LEGACY_KERAS="1" if legacy else "0",
    )
    return subprocess.run(
        [sys.executable, "-m", "mpdoctor", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=600
    )


# ------------------------------------------------------------------------------------ clean code, opt-in MP603


@pytest.mark.parametrize("legacy,source", [(False, KERAS3_CLEAN), (True, TF_KERAS_CLEAN)], ids=["keras3", "tf_keras"])
@pytest.mark.usefixtures("tensorflow")
def test_a_clean_mixed_precision_script_passes_with_the_trace(tmp_path, legacy, source):
    (tmp_path / "clean.py").write_text(source)
    result = mpdoctor("check", "--trace", "clean.py", cwd=tmp_path, legacy=legacy)
    assert (result.returncode, result.stdout) == (0, "All checks passed (1 file checked).\n"), result.stderr


def _slow_here(report: dict, dtype: str) -> bool:
    """Whether the traced machine lacks fast `dtype` hardware (this CPU machine: yes; a Volta+ GPU: no)."""
    from mpdoctor.facts.hardware import slow_hardware
    from mpdoctor.facts.schema import Environment

    return slow_hardware(Environment.from_json(report["traces"][0]["environment"]), dtype) is not None


@pytest.mark.parametrize("legacy,source", [(False, KERAS3_CLEAN), (True, TF_KERAS_CLEAN)], ids=["keras3", "tf_keras"])
@pytest.mark.usefixtures("tensorflow")
def test_mp603_is_reported_when_selected_by_its_code(tmp_path, legacy, source):
    (tmp_path / "clean.py").write_text(source)
    result = mpdoctor("check", "--extend-select", "MP603", "--format", "json", "clean.py", cwd=tmp_path, legacy=legacy)
    report = json.loads(result.stdout)
    found = [(d["code"], d["line"]) for d in report["diagnostics"]]
    assert found == ([("MP603", 4)] if _slow_here(report, "float16") else [])
    assert result.returncode == 0  # info never fails the default --fail-on warning


@pytest.mark.parametrize(
    "legacy,source", [(False, KERAS3_LAYER_DTYPE), (True, TF_KERAS_LAYER_DTYPE)], ids=["keras3", "tf_keras"]
)
@pytest.mark.usefixtures("tensorflow")
def test_mp603_when_mixed_precision_comes_only_from_a_layer_dtype(tmp_path, legacy, source):
    (tmp_path / "layer.py").write_text(source)
    result = mpdoctor("check", "--select", "MP603", "--format", "json", "layer.py", cwd=tmp_path, legacy=legacy)
    report = json.loads(result.stdout)
    found = [(d["code"], d["line"], d["message"].split(" on a machine")[0]) for d in report["diagnostics"]]
    expected = [("MP603", 5, 'Dense `dense` with dtype="mixed_float16"')] if _slow_here(report, "float16") else []
    assert found == expected, result.stderr
    # Negative: a float32 layer dtype is no float16 compute.
    (tmp_path / "float32.py").write_text(source.replace('dtype="mixed_float16"', 'dtype="float32"'))
    result = mpdoctor("check", "--select", "MP603", "--format", "json", "float32.py", cwd=tmp_path, legacy=legacy)
    assert json.loads(result.stdout)["diagnostics"] == []


# ------------------------------------------------------------------------------------------------- --version


def test_version_names_mpdoctor_and_the_libraries_it_sees():
    from importlib.metadata import PackageNotFoundError, version

    from mpdoctor import __version__

    result = subprocess.run([sys.executable, "-m", "mpdoctor", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"mpdoctor {__version__}"
    for name in ("tensorflow", "keras", "tf-keras", "tensorflow-hub"):
        try:
            expected = version(name)
        except PackageNotFoundError:
            expected = "not installed"
        assert f"{name} {expected}" in lines
    assert lines[-1] == f"python {sys.version.split()[0]}"


def test_version_says_what_is_not_installed(monkeypatch):
    import importlib.metadata

    from mpdoctor.cli import version_text

    def only_keras(name):
        if name == "keras":
            return "3.99.0"
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", only_keras)
    assert version_text().splitlines()[1:5] == [
        "tensorflow not installed",
        "keras 3.99.0",
        "tf-keras not installed",
        "tensorflow-hub not installed",
    ]


# ------------------------------------------------------------------------------- paths as the user's code wrote them

SAVE_THEN_RESTORE_TF_KERAS = """\
import tf_keras as keras


def make():
    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(3, dtype="float32")(keras.layers.Dense(8)(inputs))
    return keras.Model(inputs, outputs)


float32_model = make()
float32_model.save_weights("pretrained")

keras.mixed_precision.set_global_policy("float16")
model = make()
model.load_weights("pretrained")
"""
SAVE_THEN_RESTORE_KERAS3 = """\
import keras
import tensorflow as tf


def make():
    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(3, dtype="float32")(keras.layers.Dense(8)(inputs))
    return keras.Model(inputs, outputs)


float32_model = make()
tf.train.Checkpoint(model=float32_model).write("pretrained")

keras.mixed_precision.set_global_policy("float16")
model = make()
tf.train.Checkpoint(model=model).read("pretrained")
"""


@pytest.mark.parametrize(
    "legacy,source,call,line",
    [
        (True, SAVE_THEN_RESTORE_TF_KERAS, "model.load_weights(pretrained)", 15),
        (False, SAVE_THEN_RESTORE_KERAS3, "tf.train.Checkpoint.read(pretrained)", 16),
    ],
    ids=["tf_keras", "keras3"],
)
@pytest.mark.usefixtures("tensorflow")
def test_messages_name_the_path_the_code_saved_to_not_the_scratch_directory(tmp_path, legacy, source, call, line):
    from trace_support import run_python

    script = tmp_path / "restore.py"
    script.write_text(source)
    result = mpdoctor("check", "--format", "json", "restore.py", cwd=tmp_path, legacy=legacy)
    assert "mpdoctor-trace" not in result.stdout and "scratch" not in result.stdout
    [mp301] = [d for d in json.loads(result.stdout)["diagnostics"] if d["code"] == "MP301"]
    assert mp301["line"] == line and mp301["message"].startswith(f"{call} failed ("), mp301["message"]
    assert not list(tmp_path.glob("pretrained*"))  # the trace wrote nothing here
    # Ground truth: run for real, the restore fails.
    assert run_python(script, legacy=legacy).returncode != 0


def test_scratch_paths_map_back_to_what_the_code_asked_for():
    from mpdoctor.trace.runner import _user_paths

    scratch = "/tmp/mpdoctor-trace-x/scratch"
    back = _user_paths({f"{scratch}/1/pretrained": "pretrained", f"{scratch}/10/ckpt": "/data/ckpt"})
    facts = {
        "restores": [{"path": f"{scratch}/1/pretrained", "error": {"message": f"{scratch}/10/ckpt-1.index: bad"}}],
        "exports": [{"path": "out", "written_to": f"{scratch}/1/pretrained"}],
        "other": [f"in {scratch}/1 and {scratch}/10", 3, None],
    }
    assert back(facts) == {
        "restores": [{"path": "pretrained", "error": {"message": "/data/ckpt-1.index: bad"}}],
        "exports": [{"path": "out", "written_to": f"{scratch}/1/pretrained"}],  # where it was written, on purpose
        "other": ["in . and /data", 3, None],
    }
    assert _user_paths({})("unchanged") == "unchanged"


# ----------------------------------------------------------------------------------- --assume-policy in the trace

# The policy is set by another module of the program: this file sets none.
KERAS3_NO_POLICY = """\
import keras


def build_model():
    return keras.Sequential([
        keras.Input((32,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
"""
TF_KERAS_NO_POLICY = KERAS3_NO_POLICY.replace("import keras", "import tf_keras as keras")


@pytest.mark.parametrize(
    "legacy,source", [(False, KERAS3_NO_POLICY), (True, TF_KERAS_NO_POLICY)], ids=["keras3", "tf_keras"]
)
@pytest.mark.usefixtures("tensorflow")
def test_assume_policy_reaches_the_trace(tmp_path, legacy, source):
    (tmp_path / "head.py").write_text(source)
    result = mpdoctor(
        "check", "--assume-policy", "mixed_float16", "--format", "json", "head.py", cwd=tmp_path, legacy=legacy
    )
    report = json.loads(result.stdout)
    found = [(d["code"], d["line"], d["passes"]) for d in report["diagnostics"]]
    assert found == [("MP401", 8, ["static", "trace"])], result.stderr  # the run saw the float16 softmax
    [model] = report["traces"][0]["models"]
    assert model["numerics"]["dtype"] == "float16" and not model["numerics"]["skipped"]
    assert report["traces"][0]["environment"]["global_policy"] == "mixed_float16"
    # Negative: without the option the file runs in float32, and a policy the file sets itself wins over it.
    plain = mpdoctor("check", "--format", "json", "head.py", cwd=tmp_path, legacy=legacy)
    assert json.loads(plain.stdout)["diagnostics"] == []
    own = source.replace(
        "\n\ndef build_model", '\nkeras.mixed_precision.set_global_policy("float32")\n\ndef build_model'
    )
    (tmp_path / "own.py").write_text(own)
    result = mpdoctor(
        "check", "--assume-policy", "mixed_float16", "--format", "json", "own.py", cwd=tmp_path, legacy=legacy
    )
    assert json.loads(result.stdout)["diagnostics"] == []
