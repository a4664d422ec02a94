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
