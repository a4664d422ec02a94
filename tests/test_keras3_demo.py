"""The Keras 3 demo, examples/keras3_demo.py, on each backend (issue 36): run for real first (the padded example's
predictions are NaN under mixed_float16 on TensorFlow, JAX and PyTorch alike), then `mpdoctor check` with its trace
on that backend gives the same findings on each, and `--fix` makes the file predict finite values there. TensorFlow
runs in the main suite; JAX and PyTorch in the backends stage (ci/backends.py, marked `backend`)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "keras3_demo.py"
BACKENDS = [
    pytest.param("tensorflow", marks=pytest.mark.tf),
    pytest.param("jax", marks=pytest.mark.backend),
    pytest.param("torch", marks=pytest.mark.backend),
]


def environment(backend: str) -> dict:
    return dict(
        os.environ,
        KERAS_BACKEND=backend,
        TF_USE_LEGACY_KERAS="0",
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )


def predictions(path: Path, backend: str) -> list[list[float]]:
    """Ground truth: the file's own `__main__` prediction on a batch whose second example is padded."""
    done = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env=environment(backend), timeout=300
    )
    last = (done.stdout.strip().splitlines() or [""])[-1]
    assert last.startswith(backend + " "), done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(last.split(" ", 1)[1].replace("nan", "NaN"))  # Python prints NaN as nan


def check(path: Path, backend: str, *options: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "mpdoctor", "check", "--trace", "--no-cache", *options, str(path)]
    return subprocess.run(command, capture_output=True, text=True, env=environment(backend), timeout=600)


def line_of(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_keras3_demo_breaks_is_diagnosed_and_fixed_alike_on_every_backend(backend, tmp_path):
    module = "tensorflow" if backend == "tensorflow" else backend
    if importlib.util.find_spec("keras") is None or importlib.util.find_spec(module) is None:
        pytest.skip(f"needs keras and {module}")
    path = tmp_path / DEMO.name
    shutil.copy(DEMO, path)
    text = path.read_text()
    first, padded = predictions(path, backend)
    assert all(value == value for value in first) and all(value != value for value in padded), (first, padded)

    found = check(path, backend, "--format", "json", "--exit-zero")
    assert found.returncode == 0, found.stderr[-2000:]
    diagnostics = json.loads(found.stdout)["diagnostics"]
    norm, head = line_of(text, "+ 1e-12)"), line_of(text, 'activation="softmax"')
    got = sorted((d["line"], d["code"]) for d in diagnostics)
    assert got == sorted([(norm, "MP403"), (norm, "MP404"), (norm, "MP407"), (head, "MP401")]), got
    mp404 = next(d for d in diagnostics if d["code"] == "MP404")
    assert "first non-finite op: `rsqrt`" in mp404["message"].lower() and "trace" in mp404["passes"], mp404

    fixed = check(path, backend, "--fix")
    assert "Fixed 2 problems" in fixed.stdout and "(verified)" in fixed.stdout, fixed.stdout + fixed.stderr
    first, padded = predictions(path, backend)
    assert all(value == value for value in first + padded), (first, padded)
