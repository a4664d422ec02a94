"""Keras 3: gradients accumulated over micro-batches; the LossScaleOptimizer scales each micro-batch loss and
unscales the sum when it applies it (a linear sum: the scale commutes with it)."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
ACCUMULATION_STEPS = 4

model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1, dtype="float32")])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))


def train_step(x, y):
    accumulated = [tf.zeros_like(v) for v in model.trainable_variables]
    for xb, yb in zip(tf.split(x, ACCUMULATION_STEPS), tf.split(y, ACCUMULATION_STEPS)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb)) / ACCUMULATION_STEPS
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        accumulated = [a + g for a, g in zip(accumulated, grads)]
    optimizer.apply_gradients(zip(accumulated, model.trainable_variables))


rng = np.random.RandomState(0)
x_batch = rng.normal(size=(32, 8)).astype("float32")
y_batch = rng.normal(size=(32, 1)).astype("float32")

if __name__ == "__main__":
    for _ in range(3):
        train_step(x_batch, y_batch)
