# fix-options: --unsafe-fixes
"""Keras 3: a plain optimizer under mixed_float16 and each gradient clipped by its norm before apply_gradients. The
fix wraps the optimizer, scales the loss and moves the clip into the optimizer (`clipnorm=0.5`, the same per-tensor
clip, after Keras 3's LossScaleOptimizer has unscaled), so one step of the fixed file moves the weights like the
float32 step (issue 19)."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1, dtype="float32")])
optimizer = keras.optimizers.SGD(0.1)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    grads = [tf.clip_by_norm(g, 0.5) for g in grads]
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


x_batch = np.random.RandomState(0).normal(size=(32, 8)).astype("float32")
y_batch = np.random.RandomState(1).normal(size=(32, 1)).astype("float32")
if __name__ == "__main__":
    train_step(x_batch, y_batch)
