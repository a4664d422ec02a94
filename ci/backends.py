"""The backends stage: the tests marked `backend` (the trace on Keras 3's JAX and PyTorch backends) in a virtualenv
with Keras, JAX (CPU) and PyTorch (CPU) and without TensorFlow, so the stage also proves that the trace on those
backends never needs TensorFlow (issue 36).

    python3 ci/backends.py              # what .ci/run runs
    python3 ci/backends.py -- -x -k jax  # more pytest arguments after --

The virtualenv is cached like ci/no_tf.py's, in $MPDOCTOR_MATRIX_CACHE (default ~/.cache/mpdoctor-matrix):
`venvs/backends-<hash>/`, reused while pyproject.toml's dependencies, its [test] extra and the pins below are
unchanged (mpdoctor itself is installed editable: the stage tests the working tree). Standard library only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "ci"))
from matrix import cache_dir, stage_venv  # noqa: E402

# torch==2.13.0: the CPU build (a range admitting a newer release pulls a CUDA build of several GB); JAX's CPU wheels.
BACKENDS = ["keras>=3.10,<4", "jax[cpu]>=0.4.20,<0.11", "torch==2.13.0", "h5py"]
BUILD = ["setuptools>=68", "wheel"]


def requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return project["dependencies"] + project["optional-dependencies"]["test"] + BACKENDS + BUILD


def venv_for(cache: Path) -> Path:
    """The stage's venv: mpdoctor's dependencies, its [test] extra, Keras, JAX and PyTorch; reused while unchanged."""
    return stage_venv(cache, "backends", requirements())


def has_tensorflow(venv: Path) -> bool:
    """TensorFlow importable in the venv: then the stage would not prove the trace runs without it."""
    script = "import importlib.util; print(importlib.util.find_spec('tensorflow') is not None)"
    found = subprocess.run([venv / "bin" / "python", "-c", script], check=True, capture_output=True, text=True)
    return found.stdout.strip() == "True"


def main(argv: list[str]) -> int:
    venv = venv_for(cache_dir())
    if has_tensorflow(venv):
        print(f"backends: TensorFlow installed in {venv}: the stage needs a venv without it", flush=True)
        return 1
    start = time.monotonic()
    # One process: the tests share one fork server per backend (tests/test_backend_trace.py).
    pytest = [venv / "bin" / "python", "-m", "pytest", "-m", "backend", "-q", "-n", "0", "-p", "no:cacheprovider"]
    done = subprocess.run([str(c) for c in pytest + argv], cwd=REPO, env=dict(os.environ))
    print(f"backends: pytest -m backend on JAX and PyTorch: exit {done.returncode} in {time.monotonic() - start:.0f} s")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] if sys.argv[1:2] != ["--"] else sys.argv[2:]))
