"""The Keras 3 backend of the resolved target (mpdoctor.project.backend, issue 36): the file's KERAS_BACKEND, a
Dockerfile's ENV, the backends it imports, the project's declared jax/torch, the environment; shown by
`check --show-target` and in the JSON report. No TensorFlow, jax or torch."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from mpdoctor.cli import main
from mpdoctor.project import environment, target
from mpdoctor.project.target import DECLARED, DEFAULT, ENVIRONMENT, FILE, Overrides, Target, target_for

KERAS = "import keras\nmodel = keras.Sequential([keras.layers.Dense(2)])\n"
SETS_JAX = 'import os\nos.environ["KERAS_BACKEND"] = "jax"\n' + KERAS
DEFAULTS_JAX = 'import os\nos.environ.setdefault("KERAS_BACKEND", "jax")\n' + KERAS
IMPORTS_TORCH = "import torch\n" + KERAS


@pytest.fixture(autouse=True)
def installed(monkeypatch):
    """TF 2.21 and Keras 3 installed, no KERAS_BACKEND nor keras.json, a fresh read of project files per test."""
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    monkeypatch.setattr(environment, "tensorflow_version", lambda: (2, 21))
    monkeypatch.setattr(environment, "standalone_keras_major", lambda: 3)
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.setenv("KERAS_HOME", "/nonexistent-keras-home")
    target.new_run()


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def resolve(directory: Path, source: str = KERAS, name: str = "model.py", **overrides) -> Target:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    target.new_run()
    return target_for(str(path), ast.parse(source), source, Overrides(**overrides))


def backend(resolved: Target) -> tuple[str, str]:
    return resolved.backend, resolved.backend_source


def test_nothing_says_so_keras_runs_on_tensorflow(project):
    assert backend(resolve(project)) == ("tensorflow", DEFAULT)


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [("jax", "jax"), ("jax[cuda12]>=0.4.30", "jax"), ("jaxlib==0.4.30", "jax"), ("torch>=2.2", "torch")],
)
def test_a_declared_backend_package_chooses_it(project, requirement, expected):
    (project / "requirements.txt").write_text(f"keras>=3\n{requirement}\n")
    resolved = resolve(project)
    assert backend(resolved) == (expected, DECLARED)
    assert requirement in resolved.backend_origin and "requirements.txt:2" in resolved.backend_origin


def test_conda_pytorch_is_torch(project):
    (project / "environment.yml").write_text(
        "dependencies:\n  - python=3.11\n  - pytorch=2.3\n  - pip:\n    - keras>=3\n"
    )
    resolved = resolve(project)
    assert backend(resolved) == ("torch", DECLARED) and "environment.yml" in resolved.backend_origin


def test_a_declared_tensorflow_or_both_backends_decide_nothing(project):
    (project / "requirements.txt").write_text("tensorflow==2.21.*\njax\n")
    assert backend(resolve(project)) == ("tensorflow", DEFAULT)
    (project / "requirements.txt").write_text("keras>=3\njax\ntorch\n")
    assert backend(resolve(project)) == ("tensorflow", DEFAULT)


def test_a_backend_only_folder_does_not_hide_the_parents_tensorflow_pin(project):
    (project / "requirements.txt").write_text("tensorflow>=2.12,<2.16\n")
    (project / "sub").mkdir()
    (project / "sub" / "requirements.txt").write_text("torch\n")
    resolved = resolve(project / "sub", "import tensorflow as tf\nmodel = tf.keras.Sequential()\n")
    assert resolved.tensorflow_text == ">=2.12,<2.16" and resolved.keras_major == 2
    assert backend(resolved) == ("tensorflow", DEFAULT)  # Keras 2 runs on TensorFlow only


def test_dockerfile_env_chooses_the_backend(project):
    (project / "Dockerfile").write_text("FROM python:3.11\nENV KERAS_BACKEND=jax\nRUN pip install keras jax\n")
    resolved = resolve(project)
    assert backend(resolved) == ("jax", DECLARED) and "Dockerfile:2" in resolved.backend_origin


def test_the_file_setting_keras_backend_beats_a_dockerfile_its_setdefault_does_not(project):
    (project / "Dockerfile").write_text("FROM python:3.11\nENV KERAS_BACKEND=torch\n")
    resolved = resolve(project, SETS_JAX)
    assert backend(resolved) == ("jax", FILE) and "line 2" in resolved.backend_origin
    assert backend(resolve(project, DEFAULTS_JAX)) == ("torch", DECLARED)
    (project / "Dockerfile").unlink()
    assert backend(resolve(project, DEFAULTS_JAX)) == ("jax", FILE)


def test_a_file_importing_one_backend_and_no_tensorflow_is_written_for_it(project):
    assert backend(resolve(project, IMPORTS_TORCH)) == ("torch", FILE)
    assert backend(resolve(project, "import tensorflow as tf\n" + IMPORTS_TORCH)) == ("tensorflow", DEFAULT)


def test_the_environment_is_the_last_source(project, monkeypatch, tmp_path):
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    resolved = resolve(project)
    assert backend(resolved) == ("torch", ENVIRONMENT) and "KERAS_BACKEND=torch" in resolved.backend_origin
    assert backend(resolve(project, SETS_JAX)) == ("jax", FILE)
    monkeypatch.delenv("KERAS_BACKEND")
    home = tmp_path / "keras-home"
    home.mkdir()
    (home / "keras.json").write_text(json.dumps({"backend": "jax", "floatx": "float32"}))
    monkeypatch.setenv("KERAS_HOME", str(home))
    assert backend(resolve(project)) == ("jax", ENVIRONMENT)


def test_the_configuration_beats_everything(project):
    (project / "Dockerfile").write_text("FROM python:3.11\nENV KERAS_BACKEND=jax\n")
    resolved = resolve(project, SETS_JAX, keras_backend="torch")
    assert backend(resolved) == ("torch", "config") and resolved.backend_origin == "[tool.mpdoctor] keras-backend"


def test_keras2_runs_on_tensorflow_whatever_the_file_says(project):
    assert backend(resolve(project, SETS_JAX, keras_version=2)) == ("tensorflow", DEFAULT)


@pytest.mark.parametrize("value", ["mxnet", "pytorch", "JAX"])
def test_a_value_keras_does_not_accept_is_not_a_choice(project, value):
    """Keras takes KERAS_BACKEND exactly as written and raises on anything but its backends' names."""
    assert backend(resolve(project, SETS_JAX.replace('"jax"', f'"{value}"'))) == ("tensorflow", DEFAULT)


def test_json_has_the_backend_only_when_not_tensorflow_and_reads_back(project):
    resolved = resolve(project, SETS_JAX)
    data = resolved.to_json()
    assert data["backend"] == {"name": "jax", "source": FILE, "origin": resolved.backend_origin}
    assert backend(Target.from_json(data)) == ("jax", FILE)
    assert "backend" not in resolve(project).to_json()
    assert backend(Target.from_json(resolve(project).to_json())) == ("tensorflow", DEFAULT)


def test_show_target_names_the_backend_and_its_declarations(project, capsys):
    (project / "requirements.txt").write_text("keras>=3\ntorch==2.3.*\n")
    (project / "train.py").write_text(KERAS)
    assert main(["check", "--no-trace", "--show-target", "train.py"]) == 0
    out = capsys.readouterr().out
    assert "    backend: torch  [declared: the project declares torch==2.3.* (requirements.txt:2)" in out
    assert "  declared about the Keras backend:\n    requirements.txt:2: torch==2.3.*" in out


def test_the_pyproject_keras_backend_key_reaches_the_target(project, capsys):
    # The same key chooses the trace's backend (trace/backend_choice.py); the static target must agree with it.
    (project / "pyproject.toml").write_text('[tool.mpdoctor]\nkeras-backend = "jax"\n')
    (project / "train.py").write_text(KERAS)
    assert main(["check", "--no-trace", "--show-target", "train.py"]) == 0
    assert "    backend: jax  [config: [tool.mpdoctor] keras-backend]" in capsys.readouterr().out
