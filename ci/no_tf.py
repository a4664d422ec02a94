"""The no-TensorFlow stage: the tests not marked `tf` in a virtualenv without TensorFlow, Keras, tf_keras,
tensorflow-hub, numpy or h5py (mpdoctor and its [test] and [server] extras only), with MPDOCTOR_TEST_BLOCK_TF=1 on
top (tests/no_tf/tf_blocker.py: those packages cannot be imported by the tests or any Python they start, even if
something installed one). It proves the static pass, the reports and the fixes need none of them.

    python3 ci/no_tf.py              # what .ci/run runs
    python3 ci/no_tf.py -- -x -k fix  # more pytest arguments after --

The virtualenv is cached like ci/matrix.py's, in $MPDOCTOR_MATRIX_CACHE (default ~/.cache/mpdoctor-matrix):
`venvs/no-tf-<hash>/`, reused while pyproject.toml's dependencies and [test] and [server] extras are unchanged
(mpdoctor itself is installed editable: the stage tests the working tree). Standard library only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "no_tf"))
from tf_blocker import BLOCKED, ENV  # noqa: E402  (standard library only, shared with the test run)

sys.path.insert(0, str(REPO / "ci"))
from matrix import cache_dir, stage_venv  # noqa: E402

# mpdoctor's build backend, in the venv: mpdoctor is installed from the working tree without build isolation (no
# download at each run).
BUILD = ["setuptools>=68", "wheel"]


def requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    return project["dependencies"] + extras["test"] + extras["server"] + BUILD  # the server's tests need no TF


def venv_for(cache: Path) -> Path:
    """The stage's venv, with mpdoctor's dependencies and its [test] and [server] extras; reused while unchanged."""
    return stage_venv(cache, "no-tf", requirements())


def installed_blocked(venv: Path) -> list[str]:
    """The blocked packages importable in the venv (without the blocker): none, or the stage proves nothing."""
    script = "import importlib.util, sys\nprint(' '.join(n for n in sys.argv[1:] if importlib.util.find_spec(n)))"
    found = subprocess.run(
        [venv / "bin" / "python", "-c", script, *sorted(BLOCKED)], check=True, capture_output=True, text=True
    )
    return found.stdout.split()


def main(argv: list[str]) -> int:
    venv = venv_for(cache_dir())
    present = installed_blocked(venv)
    if present:
        print(f"no_tf: {', '.join(present)} installed in {venv}: the stage needs a venv without them", flush=True)
        return 1
    start = time.monotonic()
    pytest = [venv / "bin" / "python", "-m", "pytest", "-m", "not tf", "-q", "-n", "auto", "-p", "no:cacheprovider"]
    done = subprocess.run([str(c) for c in pytest + argv], cwd=REPO, env=dict(os.environ, **{ENV: "1"}))
    print(f"no_tf: pytest -m 'not tf' without TensorFlow: exit {done.returncode} in {time.monotonic() - start:.0f} s")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] if sys.argv[1:2] != ["--"] else sys.argv[2:]))
