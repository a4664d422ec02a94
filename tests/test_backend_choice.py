"""Which Keras backend the trace runs on (issue 36), decided in the parent without importing anything: KERAS_BACKEND,
else `[tool.mpdoctor] keras-backend`, else keras.json, else TensorFlow; named to the child; refused clearly where the
trace cannot run. No TensorFlow, JAX or PyTorch needed (the trace itself on JAX and PyTorch: test_backend_trace.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_reliability import run_main

from mpdoctor.config import Config, ConfigError, load_config
from mpdoctor.trace import runner
from mpdoctor.trace.backend_choice import chosen_backend
from mpdoctor.trace.checks import child_environment


def keras_home(tmp_path: Path, backend: str) -> dict[str, str]:
    (tmp_path / "keras.json").write_text(json.dumps({"backend": backend, "floatx": "float32"}))
    return {"KERAS_HOME": str(tmp_path)}


def test_the_environment_wins_then_the_project_then_keras_json(tmp_path):
    home = keras_home(tmp_path, "torch")
    assert chosen_backend("jax", {**home, "KERAS_BACKEND": "tensorflow"}).name == "tensorflow"
    assert chosen_backend("jax", home).name == "jax"
    choice = chosen_backend(None, home)
    assert (choice.name, choice.origin) == ("torch", str(tmp_path / "keras.json"))
    assert chosen_backend(None, {"KERAS_HOME": str(tmp_path / "none")}).origin is None  # default: TensorFlow
    assert chosen_backend(None, {"KERAS_BACKEND": "", "KERAS_HOME": str(tmp_path / "none")}).tensorflow  # as Keras


def test_an_unreadable_keras_json_is_ignored_as_keras_ignores_it(tmp_path):
    (tmp_path / "keras.json").write_text("{not json")
    assert chosen_backend(None, {"KERAS_HOME": str(tmp_path)}).tensorflow


def test_the_config_key_is_checked(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.mpdoctor]\nkeras-backend = "jax"\n')
    assert load_config(tmp_path / "m.py").keras_backend == "jax"
    (tmp_path / "pyproject.toml").write_text('[tool.mpdoctor]\nkeras-backend = "pytorch"\n')
    with pytest.raises(ConfigError, match=r"keras-backend: expected one of tensorflow, jax, torch.*'pytorch'"):
        load_config(tmp_path / "m.py")


def test_the_child_is_told_the_backend_unless_it_has_it_already(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "none"))
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert child_environment(None) is None  # the default: the caller's environment as it is
    assert child_environment(None, "jax")["KERAS_BACKEND"] == "jax"  # the project's setting
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    keras_home(tmp_path, "torch")
    assert child_environment(None)["KERAS_BACKEND"] == "torch"  # keras.json's, named: the server is keyed on it
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert child_environment(None, "torch") is None  # KERAS_BACKEND reaches the child as it is


def test_the_cache_is_keyed_on_the_backend_however_chosen(tmp_path, monkeypatch):
    from mpdoctor.cache import _run_parts
    from mpdoctor.engine import TraceOptions

    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    keras_home(tmp_path, "jax")
    assert _run_parts(Config(), TraceOptions())["keras_backend"] == "jax"
    keras_home(tmp_path, "torch")
    assert _run_parts(Config(), TraceOptions())["keras_backend"] == "torch"


def test_a_backend_that_is_not_installed_or_not_traced_is_said(monkeypatch):
    monkeypatch.setattr(runner.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert runner.backend_missing() == (
        "--trace on the jax backend (KERAS_BACKEND) needs keras and jax in this environment "
        "(pip install 'mpdoctor[jax]')"
    )
    monkeypatch.setenv("KERAS_BACKEND", "numpy")
    assert "not on 'numpy' (KERAS_BACKEND)" in runner.backend_missing()


def test_check_trace_names_what_the_backend_needs(tmp_path, monkeypatch):
    monkeypatch.setattr(runner.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    (tmp_path / "m.py").write_text("import keras\n")
    code, _, err = run_main("check", "--trace", "m.py", cwd=tmp_path)
    assert code == 2
    assert err.strip().endswith(
        "needs keras and torch in this environment (pip install 'mpdoctor[torch]'); "
        "use --no-trace for the static pass alone"
    ), err


def test_plan_names_what_the_backend_needs(tmp_path, monkeypatch):
    """plan runs the model on the chosen backend (issue 36): without it installed, it says what to install."""
    monkeypatch.setattr(runner.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    (tmp_path / "m.py").write_text("import keras\n")
    code, _, err = run_main("plan", "m.py", cwd=tmp_path)
    assert code == 2
    assert err.strip().endswith(
        "plan (it runs the model) on the jax backend (KERAS_BACKEND) needs keras and jax in this environment "
        "(pip install 'mpdoctor[jax]')"
    ), err
    assert os.listdir(tmp_path) == ["m.py"]  # nothing written
