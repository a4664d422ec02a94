# fix-options: --target-tensorflow >=2.16
"""A tf_keras step kept runnable by `hasattr` shims, ported to Keras 3 (issue 30). On Keras 3 the guard is False,
so the loss is never scaled and the LossScaleOptimizer divides the gradients by 2**15: one step moves the weights
3e-5 times as far as float32. Renaming only the call (what --fix wrote before) kept the guard on the old name; the
fix scales the other arm with scale_loss, so the shim scales on both Keras lines. The guarded get_unscaled_gradients is already skipped on Keras 3, as it must be."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1, dtype="float32")])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        scaled = optimizer.get_scaled_loss(loss) if hasattr(optimizer, "get_scaled_loss") else loss
    grads = tape.gradient(scaled, model.trainable_variables)
    grads = optimizer.get_unscaled_gradients(grads) if hasattr(optimizer, "get_unscaled_gradients") else grads
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


x_batch = np.random.RandomState(0).normal(size=(32, 8)).astype("float32")
y_batch = np.random.RandomState(1).normal(size=(32, 1)).astype("float32")
