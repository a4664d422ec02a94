# Functional tf_keras model: a tf.cast before the classifier Dense does nothing under mixed_float16.
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import tensorflow as tf
from tensorflow.keras import layers, mixed_precision

mixed_precision.set_global_policy("mixed_float16")

inputs = tf.keras.Input(shape=(128,))
x = layers.Dense(256, activation="relu")(inputs)
x = layers.Dense(256, activation="relu")(x)
x = tf.cast(x, tf.float32)
logits = layers.Dense(10, dtype="float32")(x)
outputs = layers.Softmax(dtype="float32")(logits)
model = tf.keras.Model(inputs, outputs)
