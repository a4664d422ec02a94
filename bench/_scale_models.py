"""The model scripts of bench/scale.py: twenty small Keras models, each a different architecture, written into a
directory. Fourteen are Keras 3 (`import keras`); three choose tf_keras in the file (`TF_USE_LEGACY_KERAS=1` before
TensorFlow is imported); three spell `tf.keras` and sit in `legacy/`, whose requirements.txt pins TensorFlow 2.15,
so their target is Keras 2 and the trace runs them with tf_keras (a sibling configuration, not the file, decides).
Some set mixed_float16 and leave a float16 softmax output (MP401), as real scripts do; others are clean.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

KERAS3_HEAD = "import keras\nfrom keras import layers\n"
IN_FILE_LEGACY_HEAD = (
    'import os\n\nos.environ["TF_USE_LEGACY_KERAS"] = "1"\n\n'
    "import tensorflow as tf\nkeras = tf.keras\nlayers = tf.keras.layers\n"
)
TF_KERAS_HEAD = "import tensorflow as tf\nkeras = tf.keras\nlayers = tf.keras.layers\n"
MIXED = 'keras.mixed_precision.set_global_policy("mixed_float16")\n'

# name -> body of build_model() (the trace calls it; `keras` and `layers` are the file's Keras)
BODIES = {
    "mlp": """
        inputs = keras.Input((16,))
        x = layers.Dense(32, activation="relu")(inputs)
        return keras.Model(inputs, layers.Dense(4, activation="softmax")(x))
    """,
    "cnn2d": """
        inputs = keras.Input((16, 16, 3))
        x = layers.Conv2D(8, 3, activation="relu")(inputs)
        x = layers.MaxPooling2D()(x)
        x = layers.Flatten()(x)
        return keras.Model(inputs, layers.Dense(10, activation="softmax", dtype="float32")(x))
    """,
    "conv1d": """
        inputs = keras.Input((32, 4))
        x = layers.Conv1D(8, 5, activation="relu")(inputs)
        x = layers.GlobalMaxPooling1D()(x)
        return keras.Model(inputs, layers.Dense(1, activation="sigmoid")(x))
    """,
    "lstm": """
        inputs = keras.Input((10, 8))
        x = layers.LSTM(16)(inputs)
        return keras.Model(inputs, layers.Dense(3)(x))
    """,
    "gru": """
        inputs = keras.Input((12, 6))
        x = layers.GRU(12, return_sequences=True)(inputs)
        x = layers.GRU(8)(x)
        return keras.Model(inputs, layers.Dense(2, activation="softmax")(x))
    """,
    "embedding": """
        inputs = keras.Input((20,), dtype="int32")
        x = layers.Embedding(100, 8)(inputs)
        x = layers.GlobalAveragePooling1D()(x)
        return keras.Model(inputs, layers.Dense(5, activation="softmax", dtype="float32")(x))
    """,
    "batchnorm": """
        inputs = keras.Input((24,))
        x = layers.Dense(24)(inputs)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)
        return keras.Model(inputs, layers.Dense(1)(x))
    """,
    "layernorm": """
        inputs = keras.Input((8, 16))
        x = layers.LayerNormalization()(inputs)
        x = layers.Dense(16, activation="gelu")(x)
        return keras.Model(inputs, layers.GlobalAveragePooling1D()(x))
    """,
    "attention": """
        inputs = keras.Input((6, 16))
        x = layers.MultiHeadAttention(num_heads=2, key_dim=8)(inputs, inputs)
        x = layers.GlobalAveragePooling1D()(x)
        return keras.Model(inputs, layers.Dense(4, activation="softmax")(x))
    """,
    "separable": """
        inputs = keras.Input((16, 16, 3))
        x = layers.SeparableConv2D(8, 3, activation="relu")(inputs)
        x = layers.GlobalAveragePooling2D()(x)
        return keras.Model(inputs, layers.Dense(2)(x))
    """,
    "depthwise": """
        inputs = keras.Input((12, 12, 4))
        x = layers.DepthwiseConv2D(3)(inputs)
        x = layers.Conv2D(8, 1)(x)
        return keras.Model(inputs, layers.GlobalMaxPooling2D()(x))
    """,
    "residual": """
        inputs = keras.Input((16,))
        x = layers.Dense(16, activation="relu")(inputs)
        x = layers.Add()([x, inputs])
        return keras.Model(inputs, layers.Dense(3, activation="softmax", dtype="float32")(x))
    """,
    "autoencoder": """
        inputs = keras.Input((32,))
        code = layers.Dense(4, activation="relu")(inputs)
        return keras.Model(inputs, layers.Dense(32, activation="sigmoid")(code))
    """,
    "transpose": """
        inputs = keras.Input((8, 8, 4))
        x = layers.Conv2DTranspose(4, 3, strides=2, padding="same")(inputs)
        return keras.Model(inputs, layers.Conv2D(1, 1)(x))
    """,
    "simplernn": """
        inputs = keras.Input((9, 3))
        x = layers.SimpleRNN(8)(inputs)
        return keras.Model(inputs, layers.Dense(2, activation="softmax")(x))
    """,
    "bidirectional": """
        inputs = keras.Input((7, 5))
        x = layers.Bidirectional(layers.LSTM(6))(inputs)
        return keras.Model(inputs, layers.Dense(1)(x))
    """,
    "timedistributed": """
        inputs = keras.Input((5, 8))
        x = layers.TimeDistributed(layers.Dense(4))(inputs)
        return keras.Model(inputs, layers.Flatten()(x))
    """,
    "two_inputs": """
        left, right = keras.Input((4,)), keras.Input((6,))
        x = layers.Concatenate()([layers.Dense(8)(left), layers.Dense(8)(right)])
        return keras.Model([left, right], layers.Dense(2, activation="softmax")(x))
    """,
    "dropout": """
        inputs = keras.Input((12,))
        x = layers.Dropout(0.2)(layers.Dense(12, activation="relu")(inputs))
        return keras.Model(inputs, layers.Dense(1, activation="sigmoid", dtype="float32")(x))
    """,
    "sequential": """
        return keras.Sequential([keras.Input((10,)), layers.Dense(6, activation="tanh"), layers.Dense(2)])
    """,
}
IN_FILE_LEGACY = ("lstm", "separable", "two_inputs")  # tf_keras chosen in the file
LEGACY_FOLDER = ("gru", "autoencoder", "dropout")  # tf.keras under a TensorFlow 2.15 pin: tf_keras
MIXED_POLICY = ("mlp", "cnn2d", "gru", "embedding", "attention", "residual", "simplernn", "two_inputs", "dropout")


def write_models(directory: Path, count: int = 20) -> list[Path]:
    """`count` model scripts (the first `count` of BODIES, in order) under `directory`; their paths."""
    written = []
    (directory / "legacy").mkdir(parents=True, exist_ok=True)
    (directory / "legacy" / "requirements.txt").write_text("tensorflow==2.15.1\n")
    for name in list(BODIES)[:count]:
        if name in IN_FILE_LEGACY:
            head, path = IN_FILE_LEGACY_HEAD, directory / f"{name}_tf_keras.py"
        elif name in LEGACY_FOLDER:
            head, path = TF_KERAS_HEAD, directory / "legacy" / f"{name}_tf_keras.py"
        else:
            head, path = KERAS3_HEAD, directory / f"{name}_keras3.py"
        policy = MIXED if name in MIXED_POLICY else ""
        body = textwrap.indent(textwrap.dedent(BODIES[name]).strip(), "    ")
        path.write_text(f"{head}\n{policy}\n\ndef build_model():\n{body}\n")
        written.append(path)
    return written


RESNET50 = textwrap.dedent("""\
    import numpy as np
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.applications.ResNet50(weights=None)
    predictions = model.predict(np.random.default_rng(0).random((2, 224, 224, 3), dtype="float32"), verbose=0)
    """)
