"""Shared helpers for tests that run the trace pass (they need TensorFlow; skipped where it is missing)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from mpdoctor.config import Config
from mpdoctor.engine import TraceOptions, check_source

FLOAT32_MODULE = textwrap.dedent("""
    import sys
    import tensorflow as tf

    class FeatureExtractor(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.ones([3, 4]))

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def __call__(self, x):
            return tf.matmul(x, self.w)

    module = FeatureExtractor()
    tf.saved_model.save(module, sys.argv[1], signatures={"serving_default": module.__call__})
    """)


def make_float32_savedmodel(directory: Path) -> Path:
    """A float32-only SavedModel (like most TF Hub models): `__call__` and `serving_default` take float32 [None, 3]."""
    script = directory / "make_savedmodel.py"
    script.write_text(FLOAT32_MODULE)
    target = directory / "float32_savedmodel"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, str(script), str(target)], check=True, env=env, capture_output=True, timeout=300)
    return target


def trace_check(
    path: Path,
    *,
    legacy: bool,
    timeout: float = 300,
    numerics: dict | None = None,
    summaries: list | None = None,
    memory_limit_mb: float | None = None,
    **config_overrides,
):
    """Static + trace diagnostics of one file, with the child on tf_keras (legacy) or Keras 3."""
    previous = os.environ.get("TF_USE_LEGACY_KERAS")
    os.environ["TF_USE_LEGACY_KERAS"] = "1" if legacy else "0"
    try:
        config = Config()
        for key, value in config_overrides.items():
            setattr(config, key, value)
        diagnostics, error = check_source(
            path.read_text(),
            path.name,
            config,
            path=str(path),
            trace=TraceOptions(enabled=True, timeout=timeout, numerics=numerics, memory_limit_mb=memory_limit_mb),
            traces=summaries,
        )
    finally:
        if previous is None:
            os.environ.pop("TF_USE_LEGACY_KERAS", None)
        else:
            os.environ["TF_USE_LEGACY_KERAS"] = previous
    assert error is None, error.render()
    return diagnostics


def codes_at(diagnostics) -> set[tuple[str, int]]:
    return {(d.code, d.location.line) for d in diagnostics}


def run_python(path: Path, *, legacy: bool, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run a model script for real (ground truth for the tests: does it break, does the fix work)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1" if legacy else "0")
    return subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=timeout, cwd=path.parent
    )


def write_overflowing_checkpoint(prefix: Path, env: dict | None = None) -> None:
    """A TF2 checkpoint `kernel` (4x2, all 1e5: beyond float16's 65504) and `bias` (zeros), written in a child."""
    subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""\
        import numpy as np, tensorflow as tf
        kernel = tf.Variable(np.full((4, 2), 1e5, dtype=np.float32))
        bias = tf.Variable(np.zeros(2, dtype=np.float32))
        tf.train.Checkpoint(kernel=kernel, bias=bias).write({str(prefix)!r})
        """),
        ],
        check=True,
        capture_output=True,
        timeout=300,
        env=env or dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
