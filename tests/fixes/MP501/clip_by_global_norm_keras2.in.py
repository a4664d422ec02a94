# fix-options: --unsafe-fixes
"""tf_keras: a plain optimizer under mixed_float16 and gradients clipped by global norm before apply_gradients. The
tf_keras fix unscales the gradients where they are taken (get_unscaled_gradients around tape.gradient), so the
clipping sees the true gradients: fixed, and one step of the fixed file moves the weights like the float32 step."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
model = tf.keras.Sequential(
    [tf.keras.Input((8,)), tf.keras.layers.Dense(16), tf.keras.layers.Dense(1, dtype="float32")]
)
optimizer = tf.keras.optimizers.SGD(0.1)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    grads, _ = tf.clip_by_global_norm(grads, 1.0)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


x_batch = np.random.RandomState(0).normal(size=(32, 8)).astype("float32")
y_batch = np.random.RandomState(1).normal(size=(32, 1)).astype("float32")
if __name__ == "__main__":
    train_step(x_batch, y_batch)
