"""Loss-scaling fixes and their check by training on Keras 3's PyTorch and JAX backends (issue 36). Each PyTorch
fix pair (tests/fixes/MP50[12]/torch_step_*) is run for real first: the float16 kernel does not move before the
fix and moves after it; `check --fix` with the trace on PyTorch then writes the pair's output and verifies it by
a training step (the fixed step's update against float32 at loss scale 1, trace/child/step_check.py, through the
backend's own gradients). The step check itself, on each backend: a correct step agrees with float32, a doubly
scaled one moves the weights ~32768 times too far, an unscaled float16 one does not move them. Marked `backend`
(ci/backends.py runs them without TensorFlow)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mpdoctor.facts.trace_request import NumericsRequest, StepCheckRequest
from mpdoctor.fix.step import trains_like_float32
from mpdoctor.trace.runner import run_trace

pytestmark = pytest.mark.backend

TESTS = Path(__file__).parent
PAIRS = [
    TESTS / "fixes" / "MP501" / "torch_step_keras3.in.py",
    TESTS / "fixes" / "MP502" / "torch_step_lso_keras3.in.py",
]


def needs(backend: str) -> None:
    if importlib.util.find_spec("keras") is None or importlib.util.find_spec(backend) is None:
        pytest.skip(f"needs keras and {backend}")


def moved(path: Path) -> float:
    """Ground truth: the share of the float16 kernel's entries one step of the file moves, on PyTorch."""
    env = dict(os.environ, KERAS_BACKEND="torch")
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300)
    last = (done.stdout.strip().splitlines() or [""])[-1]
    assert last.startswith("moved "), done.stdout[-2000:] + done.stderr[-2000:]
    return float(last.split()[1])


@pytest.mark.parametrize("source", PAIRS, ids=lambda p: p.parent.name)
def test_a_pytorch_step_fix_trains_and_is_verified_by_a_training_step(source, tmp_path):
    needs("torch")
    expected = source.with_name(source.name.replace(".in.py", ".out.py"))
    assert moved(source) == 0.0 and moved(expected) > 0.5  # a unit whose float16 tanh saturates stays
    path = tmp_path / "step.py"
    shutil.copy(source, path)
    env = dict(os.environ, KERAS_BACKEND="torch")
    command = [sys.executable, "-m", "mpdoctor", "check", "--no-cache", "--fix", "--unsafe-fixes", str(path)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert path.read_text() == expected.read_text(), done.stdout + done.stderr
    assert "Fixed 1 problem in" in done.stdout and "(verified by a training step)" in done.stdout, done.stdout


def step_check(path: Path, backend: str, monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", backend)
    outcome = run_trace(str(path), numerics=NumericsRequest(enabled=False), step_check=StepCheckRequest("train_step"))
    assert outcome.failure is None, outcome.output_tail
    return outcome.facts.step_check


def test_the_step_check_on_pytorch_tells_a_right_scaling_from_a_double_one(tmp_path, monkeypatch):
    needs("torch")
    right = TESTS / "fixes" / "MP502" / "torch_step_lso_keras3.out.py"
    record = step_check(right, "torch", monkeypatch)
    assert record.skipped is None and trains_like_float32(record.cosine, record.norm_ratio), record
    double = tmp_path / "double.py"
    double.write_text(
        right.read_text().replace("optimizer.scale_loss(loss)", "optimizer.scale_loss(optimizer.scale_loss(loss))")
    )
    record = step_check(double, "torch", monkeypatch)
    assert record.skipped is None and record.norm_ratio > 1000, record


@pytest.mark.parametrize("name,trains", [("loss_fn_scaled_keras3.py", True), ("loss_fn_no_scaling_keras3.py", False)])
def test_the_step_check_on_jax_runs_the_step_eagerly(name, trains, monkeypatch):
    """The files' own JAX step (jax.grad of stateless_call, stateless_apply, the results assigned back), whose real
    runs tests/test_backend_trace.py checks: the scaled one trains like float32, the unscaled one does not move."""
    needs("jax")
    record = step_check(TESTS / "data" / "backends" / name, "jax", monkeypatch)
    assert record.skipped is None, record
    if trains:
        assert trains_like_float32(record.cosine, record.norm_ratio), record
    else:
        assert record.norm_ratio == 0.0, record
