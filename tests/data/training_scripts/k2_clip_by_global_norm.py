"""tf_keras: a plain SGD and gradients clipped by global norm before apply_gradients (no loss scaling)."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")


def build_model():
    return tf.keras.Sequential(
        [tf.keras.Input((8,)), tf.keras.layers.Dense(16), tf.keras.layers.Dense(1, dtype="float32")]
    )


model = build_model()
optimizer = tf.keras.optimizers.SGD(0.1)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    grads, _ = tf.clip_by_global_norm(grads, 1.0)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


rng = np.random.RandomState(0)
x_batch = rng.normal(size=(32, 8)).astype("float32")
y_batch = rng.normal(size=(32, 1)).astype("float32")

if __name__ == "__main__":
    for _ in range(5):
        train_step(x_batch, y_batch)
