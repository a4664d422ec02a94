"""Keras 3: a plain SGD and gradients clipped by value before they are applied (no loss scaling)."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1, dtype="float32")])
optimizer = keras.optimizers.SGD(0.1)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    grads = [tf.clip_by_value(g, -1.0, 1.0) for g in grads]
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


rng = np.random.RandomState(0)
x_batch = rng.normal(size=(32, 8)).astype("float32")
y_batch = rng.normal(size=(32, 1)).astype("float32")

if __name__ == "__main__":
    for _ in range(5):
        train_step(x_batch, y_batch)
