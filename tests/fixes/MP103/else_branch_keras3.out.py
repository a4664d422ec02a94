# fix-options: --target-tensorflow >=2.16
"""A tf_keras step ported to Keras 3 that scales only on its float16 path: the port renames get_scaled_loss and
drops get_unscaled_gradients there, and leaves the float32 `else` branch as it is (issue 19)."""
import os

import keras
import numpy as np
import tensorflow as tf

use_float16 = os.environ.get("FP16", "1") == "1"
if use_float16:
    keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1, dtype="float32")])
optimizer = keras.optimizers.SGD(0.1)
if use_float16:
    optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        if use_float16:
            scaled_loss = optimizer.scale_loss(loss)
    if use_float16:
        scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = scaled_grads
    else:
        grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


x_batch = np.random.RandomState(0).normal(size=(32, 8)).astype("float32")
y_batch = np.random.RandomState(1).normal(size=(32, 1)).astype("float32")
if __name__ == "__main__":
    train_step(x_batch, y_batch)
