"""`mpdoctor inspect` of a SavedModel's signatures against `saved_model_cli show --all` on the same directory.

    python bench/savedmodel.py [--quick] [--json]

The SavedModel is a small Keras model exported with `model.export` (serving signature) plus a tf.Module with two
signatures. `saved_model_cli` imports TensorFlow to read it; mpdoctor's reader parses the protobuf without TF.
Target (issue 8): inspect not slower than saved_model_cli (ratio <= 1). Time and peak RSS of each process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import main_for, mib, python_env, row, run_measured

MAKE = textwrap.dedent("""
    import sys
    import tensorflow as tf

    class Tower(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.random.normal([64, 32]))

        @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="features")])
        def embed(self, features):
            return {"embedding": tf.matmul(features, self.w)}

        @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float16, name="features")])
        def embed_half(self, features):
            return {"embedding": tf.matmul(features, tf.cast(self.w, tf.float16))}

    tower = Tower()
    tf.saved_model.save(tower, sys.argv[1], signatures={"serving_default": tower.embed, "half": tower.embed_half})
    """)

# saved_model_cli is a console script; run its entry point under the RSS wrapper so both get the same treatment.
SAVED_MODEL_CLI = "import sys\nfrom tensorflow.python.tools.saved_model_cli import main\nsys.exit(main())\n"


def results(quick: bool = False) -> list[dict]:
    if shutil.which("saved_model_cli") is None:
        return [
            row(
                "inspect SavedModel signatures",
                None,
                None,
                target="<= 1",
                note="skipped: saved_model_cli not installed",
            )
        ]
    repeat = 1 if quick else 3
    with tempfile.TemporaryDirectory(prefix="mpdoctor-bench-") as tmp:
        target = os.path.join(tmp, "tower")
        subprocess.run([sys.executable, "-c", MAKE, target], check=True, capture_output=True, env=python_env())
        ours = min((run_measured(["-m", "mpdoctor", "inspect", target]) for _ in range(repeat)), key=lambda r: r[0])
        theirs = min(
            (run_measured(["-c", SAVED_MODEL_CLI, "show", "--dir", target, "--all"]) for _ in range(repeat)),
            key=lambda r: r[0],
        )
    failed = [name for name, result in (("inspect", ours), ("saved_model_cli", theirs)) if result[2] != 0]
    note = f"vs saved_model_cli show --all; peak RSS {mib(ours[1])} vs {mib(theirs[1])}"
    if failed:
        note += f"; FAILED: {', '.join(failed)}"
    return [row("inspect SavedModel signatures", ours[0], theirs[0], target="<= 1", note=note)]


if __name__ == "__main__":
    raise SystemExit(main_for(results))
