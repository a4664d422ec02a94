"""tf_keras: gradients accumulated over micro-batches with a plain SGD (no loss scaling)."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
ACCUMULATION_STEPS = 4
model = tf.keras.Sequential(
    [tf.keras.Input((8,)), tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(1, dtype="float32")]
)
optimizer = tf.keras.optimizers.SGD(0.01)


def train_step(x, y):
    accumulated = [tf.zeros_like(v) for v in model.trainable_variables]
    for xb, yb in zip(tf.split(x, ACCUMULATION_STEPS), tf.split(y, ACCUMULATION_STEPS)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb)) / ACCUMULATION_STEPS
        grads = tape.gradient(loss, model.trainable_variables)
        accumulated = [a + g for a, g in zip(accumulated, grads)]
    optimizer.apply_gradients(zip(accumulated, model.trainable_variables))


rng = np.random.RandomState(0)
x_batch = rng.normal(size=(32, 8)).astype("float32")
y_batch = rng.normal(size=(32, 1)).astype("float32")

if __name__ == "__main__":
    for _ in range(3):
        train_step(x_batch, y_batch)
