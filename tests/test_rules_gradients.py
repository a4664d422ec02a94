"""MP504 gradient-underflow through the real trace, Keras 3 and tf_keras: a custom training loop without loss scaling
whose small gradients flush to zero under mixed_float16, and the same loop with a LossScaleOptimizer. Each file is
also run for real (`run_python`): one SGD step leaves the output layer's weights unchanged without loss scaling and
moves them with it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from trace_support import run_python, trace_check

DATA = Path(__file__).parent / "data" / "gradients"
CASES = [
    ("custom_loop_no_scaling_keras3.py", False, True),
    ("custom_loop_scaled_keras3.py", False, False),
    ("custom_loop_no_scaling_keras2.py", True, True),
    ("custom_loop_scaled_keras2.py", True, False),
]


def _expected_lines(path: Path) -> set[int]:
    return {i for i, line in enumerate(path.read_text().splitlines(), 1) if "# expect: MP504" in line}


@pytest.mark.parametrize(("name", "legacy", "underflows"), CASES, ids=[c[0] for c in CASES])
def test_gradient_underflow(tmp_path, name, legacy, underflows):
    path = tmp_path / name
    shutil.copy(DATA / name, path)
    ground = run_python(path, legacy=legacy)
    assert ground.returncode == 0, ground.stderr[-2000:]
    assert ground.stdout.strip().splitlines()[-1] == f"moved {not underflows}", ground.stdout

    summaries: list = []
    diagnostics = trace_check(path, legacy=legacy, summaries=summaries)
    found = [d for d in diagnostics if d.code == "MP504"]
    if not underflows:
        assert found == [], found
        return
    assert {d.location.line for d in found} == _expected_lines(path), found
    message = found[0].message
    assert "without loss scaling" in message and "100%" in message, message
    assert "dense_1" in message or "kernel" in message, message


def test_a_model_the_file_does_not_train_gets_no_gradient_step(tmp_path):
    path = tmp_path / "inference.py"
    path.write_text(
        "import keras\n"
        'keras.mixed_precision.set_global_policy("mixed_float16")\n'
        "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, dtype='float32')])\n"
    )
    from mpdoctor.facts.trace_request import NumericsRequest
    from mpdoctor.trace.runner import run_trace

    outcome = run_trace(str(path), numerics=NumericsRequest(enabled=True))
    assert outcome.failure is None, outcome.output_tail
    assert [m.gradients for m in outcome.facts.models] == [None]
