"""A script using absl flags (issue 31, measured on zzh8829/yolov3-tf2 in tests/data/real_repos): its zero-argument
builder reads FLAGS, which `app.run` has parsed when the user runs `python train.py`. The trace calls the builder
without `app.run`; it parses the flags as that run would (their defaults) instead of failing with
UnparsedFlagAccessError, reported as an MP001 error that failed the CI gate for working code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

TRAIN = """\
import keras
from absl import app, flags
from absl.flags import FLAGS

flags.DEFINE_integer("size", 8, "input size")
flags.DEFINE_integer("num_classes", 3, "classes")


def setup_model():
    inputs = keras.Input((FLAGS.size,))
    outputs = keras.layers.Dense(FLAGS.num_classes, activation="softmax")(inputs)
    return keras.Model(inputs, outputs)


def main(_argv):
    setup_model().summary()


if __name__ == "__main__":
    app.run(main)
"""

REQUIRED = TRAIN.replace(
    'flags.DEFINE_integer("num_classes", 3, "classes")',
    'flags.DEFINE_integer("num_classes", None, "classes")\nflags.mark_flag_as_required("num_classes")',
)


def trace(project: Path) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--no-cache", "--trace", "--format", "json", "train.py"],
        cwd=project,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=600,
        check=False,
    )
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("source,builds", [(TRAIN, True), (REQUIRED, False)], ids=["defaults", "required-flag"])
def test_a_builder_reading_absl_flags_sees_their_defaults(tmp_path, tensorflow, source, builds):
    (tmp_path / "train.py").write_text(source)
    # What the user's run does: `python train.py` parses the flags in app.run, then builds (or stops on usage).
    run = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert (run.returncode == 0) is builds, run.stderr[-2000:]
    code, report = trace(tmp_path)
    [record] = report["traces"]
    if builds:
        assert code == 0 and [d["code"] for d in report["diagnostics"]] == [], report["diagnostics"]
        assert [(model["name"], model["how"]) for model in record["models"]] == [("functional", "setup_model()")]
    else:
        # A required flag: the user's run stops with a usage error before any model; so does the trace.
        assert record["models"] == [] and "flag" in (record["exception"] or "").lower()
