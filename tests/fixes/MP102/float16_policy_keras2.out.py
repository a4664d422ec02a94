"""tf_keras: the pure float16 policy on a model that is trained (variables become float16)."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import tensorflow as tf

tf.keras.mixed_precision.set_global_policy('mixed_float16')

model = tf.keras.Sequential([
    tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
    tf.keras.layers.Dense(1, dtype=tf.float32),
])
model.compile(optimizer="adam", loss="mse")
model.fit(tf.random.normal((32, 8)), tf.random.normal((32, 1)), epochs=1)
