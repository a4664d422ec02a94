"""Keras 3: a custom loop with a heavily down-weighted loss (a small auxiliary weight) and no loss scaling: the
float16 gradients flush to zero."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
LOSS_WEIGHT = 1e-8

model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1, dtype="float32")])
optimizer = keras.optimizers.SGD(1e4)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = LOSS_WEIGHT * tf.reduce_mean(tf.square(model(x, training=True) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


rng = np.random.RandomState(0)
x_batch = rng.normal(size=(32, 8)).astype("float32")
y_batch = rng.normal(size=(32, 1)).astype("float32")

if __name__ == "__main__":
    for _ in range(5):
        train_step(x_batch, y_batch)
