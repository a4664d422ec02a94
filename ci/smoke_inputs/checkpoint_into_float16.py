"""Smoke input (MP301, trace form): a float32 checkpoint restored into float16 variables ("expected dtype half does
not equal original dtype float"). The float32 run's checkpoint is written first, by the same file."""
import os

import tensorflow as tf

PREFIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrained_fp32", "ckpt")


def build():
    return tf.keras.Sequential([
        tf.keras.Input(shape=(16,)),
        tf.keras.layers.Dense(32, activation="relu"),
        tf.keras.layers.Dense(4),
    ])


tf.train.Checkpoint(model=build()).write(PREFIX)  # the float32 training run

tf.keras.mixed_precision.set_global_policy("float16")
model = build()
tf.train.Checkpoint(model=model).read(PREFIX)
