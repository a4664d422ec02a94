"""Trace cost per Keras backend (issue 36): `mpdoctor check --trace` of one small Keras-only model (three Dense
layers, numerics on) on JAX and PyTorch, each beside the same check on TensorFlow measured in the same run.

    python bench/backends.py [--quick] [--json]

TensorFlow runs with this Python; JAX and PyTorch with the Python of a venv that has Keras and the backend (no
TensorFlow needed): $MPDOCTOR_BACKENDS_PYTHON, else the venv ci/backends.py made, else this Python if it has them.
A backend with no such Python gets no row. Each figure is the best of the repeats, a whole `mpdoctor check` run
(start-up, the fork server importing the backend, the trace and numerics).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import ROOT, main_for, python_env, row

MODEL = textwrap.dedent("""\
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")


    def build_model():
        inputs = keras.Input((32,))
        hidden = keras.layers.Dense(64, activation="relu")(inputs)
        hidden = keras.layers.Dense(64, activation="relu")(hidden)
        outputs = keras.layers.Dense(10, activation="softmax")(hidden)
        return keras.Model(inputs, outputs)
    """)


def backend_python() -> str | None:
    """A Python with Keras, JAX and PyTorch for the other backends' rows."""
    configured = os.environ.get("MPDOCTOR_BACKENDS_PYTHON")
    if configured:
        return configured
    cache = Path(os.environ.get("MPDOCTOR_MATRIX_CACHE") or Path.home() / ".cache" / "mpdoctor-matrix")
    made = sorted(glob.glob(str(cache / "venvs" / "backends-*" / "bin" / "python")))
    if made:
        return made[-1]
    if all(importlib.util.find_spec(name) for name in ("keras", "jax", "torch")):
        return sys.executable
    return None


def timed(python: str, backend: str, script: Path, repeat: int) -> float | None:
    command = [python, "-m", "mpdoctor", "check", "--trace", "--no-cache", "--exit-zero", "-q", str(script)]
    env = python_env(KERAS_BACKEND=backend)
    best = None
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - start
        if "MP401" not in done.stdout:  # the trace (or the static pass) did not report the float16 softmax
            print(f"backends: {backend}: {done.stdout[-500:]}{done.stderr[-1000:]}", file=sys.stderr)
            return None
        best = elapsed if best is None else min(best, elapsed)
    return best


def results(quick: bool = False) -> list[dict]:
    repeat = 1 if quick else 3
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "small_model.py"
        script.write_text(MODEL)
        tensorflow = timed(sys.executable, "tensorflow", script, repeat)
        rows = [row("trace, small model, TensorFlow", tensorflow, tensorflow, note="baseline of the rows below")]
        python = backend_python()
        if python is None:
            print("backends: no Python with keras, jax and torch (MPDOCTOR_BACKENDS_PYTHON)", file=sys.stderr)
            return rows
        for backend in ("jax", "torch"):
            measured = timed(python, backend, script, repeat)
            rows.append(
                row(
                    f"trace, small model, {backend}",
                    measured,
                    tensorflow,
                    note="mpdoctor check --trace with numerics, vs the same on TensorFlow",
                )
            )
    return rows


if __name__ == "__main__":
    raise SystemExit(main_for(results))
