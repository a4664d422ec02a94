# fix-options: --unsafe-fixes
"""Keras 3: a plain optimizer under mixed_float16 and gradients clipped by value before apply_gradients. Wrapping
the optimizer and scaling the loss alone would clip the scaled gradients (every one becomes +-1) and the
LossScaleOptimizer would then divide them by 2**15: one step would move the weights ~1e-5 times as far as the
float32 step. The fix moves the clip into the optimizer (`clipvalue=1.0`: Keras 3 clips after unscaling), so one
step of the fixed file moves the weights like the float32 step (issue 19)."""
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
    grads = [tf.clip_by_value(g, -1.0, 1.0) for g in grads]
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


x_batch = np.random.RandomState(0).normal(size=(32, 8)).astype("float32")
y_batch = np.random.RandomState(1).normal(size=(32, 1)).astype("float32")
if __name__ == "__main__":
    train_step(x_batch, y_batch)
