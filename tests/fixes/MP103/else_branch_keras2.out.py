"""tf_keras code on the removed `experimental` LossScaleOptimizer, scaling only on its float16 path: the fix
renames the constructor and leaves the float32 `else` branch as it is (issue 19)."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf

use_float16 = os.environ.get("FP16", "1") == "1"
if use_float16:
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16), tf.keras.layers.Dense(1, dtype="float32")])
optimizer = tf.keras.optimizers.SGD(0.1)
if use_float16:
    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        if use_float16:
            scaled_loss = optimizer.get_scaled_loss(loss)
    if use_float16:
        scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = optimizer.get_unscaled_gradients(scaled_grads)
    else:
        grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


x_batch = np.random.RandomState(0).normal(size=(32, 8)).astype("float32")
y_batch = np.random.RandomState(1).normal(size=(32, 1)).astype("float32")
if __name__ == "__main__":
    train_step(x_batch, y_batch)
