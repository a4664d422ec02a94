"""The trace on Keras 3's JAX and PyTorch backends (issue 36): the Keras 3 fixtures that use only `keras` (no
TensorFlow API) give the same findings as on TensorFlow, from a trace that really ran on that backend without
TensorFlow. Marked `backend`; skipped where Keras or the backend is not installed (the main suite), run by the CI
stage ci/backends.py (a venv with Keras, JAX and PyTorch, no TensorFlow). One process: one fork server per backend
serves every file."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from fixture_runner import expectations

from mpdoctor.config import Config, apply_overrides
from mpdoctor.engine import TraceOptions, check_source
from mpdoctor.trace import checks

pytestmark = pytest.mark.backend

TESTS = Path(__file__).parent

# The Keras 3 fixtures whose trace findings are the same on every backend (the rules there read the layer graph, the
# dtypes and the numerics, which Keras computes the same way on each): the static fixtures of those rules, and the
# trace fixtures of issue 14 (their markers are what the TensorFlow trace gives: tests/test_trace_real_code.py).
# Each runs on both backends (the MP401-MP404 and MP501 families); JAX also runs a few more.
SHARED = [
    "data/backends/float16_outputs_keras3.py",  # MP402 (trace only) beside MP401
    "fixtures/MP401/linear_float32_after_softmax_keras3.py",
    "fixtures/MP401/sequential_dense_softmax_keras3.py",
    "fixtures/MP401/subclassed_model_keras3.py",
    "fixtures/MP403/bfloat16_policy_keras3.py",
    "fixtures/MP403/custom_rmsnorm_keras3.py",
    "fixtures/MP403/no_float16_policy_keras3.py",
    "trace_fixtures/item02_numerics_cannot_run_keras3.py",
    "trace_fixtures/item09_mp404_innermost_keras3.py",  # the first non-finite op's line, named by each backend
    "trace_fixtures/item10_bfloat16_messages_keras3.py",
    "trace_fixtures/item11_float16_constants_keras3.py",
    "fixtures/MP102/float16_policy_fit_keras3.py",  # fit and compile (MP501's path): a dry run of one epoch
]
# Measured once on all 56 Keras-only Keras 3 fixtures (tests/fixtures, tests/trace_fixtures): JAX and PyTorch gave
# TensorFlow's findings on every one; these are the quick ones of the other families, run on JAX only.
JAX_ONLY = [
    "fixtures/MP207/sequential_ops_cast_keras3.py",
    "fixtures/MP407/energy_model_keras3.py",
    "fixtures/MP701/global_int8_policy_keras3.py",
    "fixtures/MP703/quantize_unbuilt_keras3.py",
    "trace_fixtures/item06_helper_builders_keras3.py",
]
CASES = [(name, "jax") for name in SHARED + JAX_ONLY] + [(name, "torch") for name in SHARED]


def installed(backend: str) -> bool:
    return importlib.util.find_spec("keras") is not None and importlib.util.find_spec(backend) is not None


def traced(path: Path, backend: str, monkeypatch):
    """(diagnostics, facts) of one check of the file with its trace on `backend`."""
    monkeypatch.setenv("KERAS_BACKEND", backend)
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "0")
    _, _, options = expectations(path)
    config = Config()
    apply_overrides(config, str(path), **options)
    outcomes = []
    original = checks.run_trace

    def capture(*args, **kwargs):
        outcomes.append(original(*args, **kwargs))
        return outcomes[-1]

    with mock.patch.object(checks, "run_trace", capture):
        diagnostics, error = check_source(
            path.read_text(encoding="utf-8"), path.name, config, path=str(path), trace=TraceOptions(enabled=True)
        )
    assert error is None, error.render()
    assert len(outcomes) == 1, "the file was not traced"
    return diagnostics, outcomes[0].facts


@pytest.mark.parametrize("name,backend", CASES, ids=[f"{backend}-{Path(name).stem}" for name, backend in CASES])
def test_the_same_findings_as_on_tensorflow(name, backend, monkeypatch, recorded_environment):
    if not installed(backend):
        pytest.skip(f"needs keras and {backend}")
    path = TESTS / name
    diagnostics, facts = traced(path, backend, monkeypatch)
    assert facts is not None and facts.tool_failure is None, facts and facts.tool_failure
    assert facts.environment.backend == backend and facts.environment.tensorflow is None  # no TensorFlow imported
    codes, expected, _ = expectations(path)
    actual = {(d.location.line, d.code) for d in diagnostics if d.code in codes}
    assert actual == expected, [(d.code, d.location.line, d.message) for d in diagnostics]
    assert not [d for d in diagnostics if d.code == "MP001"], [d.message for d in diagnostics]


STEPS = [("data/backends/jax_custom_step_keras3.py", "jax"), ("data/backends/torch_custom_step_keras3.py", "torch")]


def zero_share(path: Path, backend: str, how: str) -> float:
    """Ground truth: the file's own training step, run for real (the share of first-kernel gradients at zero)."""
    env = dict(os.environ, KERAS_BACKEND=backend)
    done = subprocess.run(
        [sys.executable, str(path), how], capture_output=True, text=True, env=env, timeout=300, cwd=path.parent
    )
    found = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(how + " "))
    assert how in found, done.stdout[-2000:] + done.stderr[-2000:]
    return float(found[how])


@pytest.mark.parametrize("name,backend", STEPS, ids=[backend for _, backend in STEPS])
def test_a_custom_step_of_the_backend_flushes_unscaled_and_traces_cleanly(
    name, backend, monkeypatch, recorded_environment
):
    if not installed(backend):
        pytest.skip(f"needs keras and {backend}")
    path = TESTS / name
    # ground truth: a loss of 1e-8 leaves every float16 gradient at zero without loss scaling, none with it
    assert zero_share(path, backend, "unscaled") == 1.0
    assert zero_share(path, backend, "scaled") == 0.0
    diagnostics, facts = traced(path, backend, monkeypatch)
    assert facts is not None and facts.tool_failure is None and facts.exception is None, facts
    assert facts.environment.backend == backend
    [model] = facts.models
    assert model.numerics is not None and model.numerics.skipped is None, model.numerics
    assert not [d for d in diagnostics if d.code in ("MP001", "MP003")], [d.message for d in diagnostics]


# MP504 and `mpdoctor plan` on the backend's own gradients: the file's own step written for the backend (its
# gradients taken where it hands them to the optimizer: user_step.py), and a compiled model's loss
# (backends.loss_and_gradients: jax.value_and_grad, PyTorch's backward()), with and without a LossScaleOptimizer.
GRADIENTS = [("data/backends/loss_fn_no_scaling_keras3.py", True), ("data/backends/loss_fn_scaled_keras3.py", False)]


def moved(path: Path, backend: str) -> bool:
    """Ground truth: the file's own step, written for the backend, run for real: does the output kernel move?"""
    env = dict(os.environ, KERAS_BACKEND=backend)
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300)
    last = done.stdout.strip().splitlines()[-1:] or [""]
    assert last[0] in ("moved True", "moved False"), done.stdout[-2000:] + done.stderr[-2000:]
    return last[0] == "moved True"


@pytest.mark.parametrize("backend", ["jax", "torch"])
@pytest.mark.parametrize("name,flushes", GRADIENTS, ids=[Path(name).stem for name, _ in GRADIENTS])
def test_mp504_from_the_gradients_of_the_backend(name, flushes, backend, monkeypatch, recorded_environment):
    if not installed(backend):
        pytest.skip(f"needs keras and {backend}")
    path = TESTS / name
    assert moved(path, backend) is not flushes
    diagnostics, facts = traced(path, backend, monkeypatch)
    [model] = facts.models
    gradients = model.gradients
    assert gradients is not None and gradients.skipped is None, gradients
    assert gradients.loss_scaling == ("none" if flushes else "LossScaleOptimizer"), gradients
    assert gradients.loss == "of the step `train_step`", gradients  # the file's own step, run on the backend
    found = [d for d in diagnostics if d.code == "MP504"]
    expected = {i for i, line in enumerate(path.read_text().splitlines(), 1) if "# expect: MP504" in line}
    assert {d.location.line for d in found} == expected, [d.message for d in found]
    if flushes:
        assert "100%" in found[0].message and "without loss scaling" in found[0].message, found[0].message


def planned(path: Path, backend: str, *options: str) -> tuple[int, dict]:
    env = dict(os.environ, KERAS_BACKEND=backend)
    command = [sys.executable, "-m", "mpdoctor", "plan", "--format", "json", *options, str(path)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)["models"][0]["plan"]


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_plan_runs_on_the_backend(backend, tmp_path):
    """The float16 softmax head is kept in float32 (as on TensorFlow: tests/test_plan.py), its training step loses
    no gradient; the loop without loss scaling is told to scale its loss rather than keep layers in float32; --fix
    writes the plan and verifies it by re-tracing on the same backend."""
    if not installed(backend):
        pytest.skip(f"needs keras and {backend}")
    head = tmp_path / "head.py"
    head.write_text((TESTS / "data/backends/softmax_head_compiled_keras3.py").read_text())
    code, plan = planned(head, backend)
    assert code == 1
    assert [(layer["name"], layer["reason"]) for layer in plan["layers"]] == [("dense_2", "output-activation")], plan[
        "layers"
    ]
    gradients = plan["final"]["gradients"]
    assert gradients["skipped"] is None and gradients["loss_scaling"] == "LossScaleOptimizer", gradients
    assert plan["gradient_advice"] is None, plan

    _, plan = planned(TESTS / GRADIENTS[0][0], backend, "--rtol", "0.05")
    assert plan["final"]["gradients"]["loss_scaling"] == "none", plan["final"]
    assert "use loss scaling" in plan["gradient_advice"] and "100%" in plan["gradient_advice"], plan

    env = dict(os.environ, KERAS_BACKEND=backend)
    command = [sys.executable, "-m", "mpdoctor", "plan", "--fix", str(head)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert "plan written into the file; verified" in done.stdout + done.stderr, done.stdout + done.stderr
    assert "'dense_2'" in head.read_text()
