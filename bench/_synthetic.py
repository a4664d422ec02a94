"""Synthetic Keras sources for the scale benchmarks and tests: one big file, or a directory of many files.

Each block is a small mixed-precision model with findings the static pass reports (a float16 softmax output, a
-1e9 mask constant in a custom layer), so the rules really run on every block rather than skipping the file.
"""

from __future__ import annotations

from pathlib import Path

HEADER = """import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")
"""

BLOCK = """

class MaskedBlock{i}(keras.layers.Layer):
    def call(self, x):
        mask = tf.cast(x > 0, x.dtype)
        return x + (1.0 - mask) * -1e9


def build_model_{i}():
    inputs = keras.Input((32,))
    x = keras.layers.Dense(64, activation="relu")(inputs)
    x = MaskedBlock{i}()(x)
    outputs = keras.layers.Dense(10, activation="softmax")(x)
    return keras.Model(inputs, outputs)
"""
BLOCK_LINES = BLOCK.count("\n")


def module_text(blocks: int, start: int = 0) -> str:
    return HEADER + "".join(BLOCK.format(i=i) for i in range(start, start + blocks))


def big_file(path: Path, lines: int = 50_000) -> Path:
    """One module of about `lines` lines (at least that many)."""
    blocks = -(-(lines - HEADER.count("\n")) // BLOCK_LINES)
    path.write_text(module_text(blocks))
    return path


def many_files(directory: Path, files: int = 2_000, blocks_per_file: int = 3) -> Path:
    """`files` modules spread over 20 packages; every fifth file mentions no TensorFlow at all (a plain helper),
    like a real tree."""
    for i in range(files):
        package = directory / f"pkg{i % 20:02d}"
        package.mkdir(parents=True, exist_ok=True)
        text = (
            module_text(blocks_per_file, start=i * blocks_per_file)
            if i % 5
            else "import os\n\n\ndef helper(path):\n    return os.path.join(path, 'data')\n" * blocks_per_file
        )
        (package / f"module_{i:04d}.py").write_text(text)
    return directory


# ------------------------------------------------------------------------------------------------ a project (issue 21)

ENTRY = '''"""Trains the models of {pkg}; --amp turns on mixed precision."""

import argparse

from tensorflow import keras

from {pkg}.data import helper_0
from {pkg}.models import MODELS


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--model", default="net_0", choices=sorted(MODELS))
    args = parser.parse_args()
    if args.amp:
        keras.mixed_precision.set_global_policy("mixed_float16")
    model = MODELS[args.model]()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return helper_0.describe(model)


if __name__ == "__main__":
    main()
'''

NET = """from tensorflow import keras

from {pkg}.layers import MaskedScores


def build_net_{k}():
    inputs = keras.Input((32,))
    x = keras.layers.Dense(64, activation="relu")(inputs)
    x = MaskedScores()(x)
    outputs = keras.layers.Dense(10, activation="softmax")(x)
    return keras.Model(inputs, outputs)
"""

LAYERS = """import tensorflow as tf
from tensorflow import keras


class MaskedScores(keras.layers.Layer):
    def call(self, x):
        mask = tf.cast(x > 0, x.dtype)
        return x + (1.0 - mask) * -1e9
"""

HELPER = '''"""Plain helpers: no TensorFlow here."""

import json
import os
{imports}

def describe(value):
    return json.dumps({{"type": type(value).__name__, "size": len(str(value))}})


def load_rows(path, limit=None):
    rows = []
    with open(os.path.join(path, "rows.jsonl"), encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            if limit is not None and number >= limit:
                break
            rows.append(json.loads(line))
    return rows


def normalise(rows, keys):
    totals = {{key: sum(row.get(key, 0) for row in rows) or 1 for key in keys}}
    return [{{key: row.get(key, 0) / totals[key] for key in keys}} for row in rows]


def batches(rows, size):
    for start in range(0, len(rows), size):
        yield rows[start : start + size]
'''


def project_tree(directory: Path, files: int = 2_000, packages: int = 20) -> Path:
    """A training repository of about `files` modules: per package an entry script `train_NN.py` (policy behind
    --amp, model from a registry), five model modules, a layer module with a -1e9 mask, and plain helpers that
    import their neighbour (the bulk of a real tree)."""
    per_package = max(files // packages, 12)
    for p in range(packages):
        pkg = f"pkg{p:02d}"
        base = directory / pkg
        (base / "models").mkdir(parents=True, exist_ok=True)
        (base / "data").mkdir(parents=True, exist_ok=True)
        (directory / f"train_{p:02d}.py").write_text(ENTRY.format(pkg=pkg))
        (base / "__init__.py").write_text("")
        (base / "data" / "__init__.py").write_text("")
        (base / "layers.py").write_text(LAYERS)
        nets = [f"build_net_{k}" for k in range(5)]
        (base / "models" / "__init__.py").write_text(
            "".join(f"from {pkg}.models.net_{k} import build_net_{k}\n" for k in range(5))
            + "\nMODELS = {"
            + ", ".join(f'"net_{k}": {name}' for k, name in enumerate(nets))
            + "}\n"
        )
        for k in range(5):
            (base / "models" / f"net_{k}.py").write_text(NET.format(pkg=pkg, k=k))
        for j in range(per_package - 10):
            imports = f"\nfrom {pkg}.data import helper_{j - 1}  # noqa: F401\n" if j else ""
            (base / "data" / f"helper_{j}.py").write_text(HELPER.format(imports=imports))
    return directory
