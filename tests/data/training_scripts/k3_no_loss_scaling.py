"""Keras 3 custom loop under mixed_float16 with a plain Adam: no loss scaling."""
import keras
import numpy as np
import tensorflow as tf
from keras import layers

keras.mixed_precision.set_global_policy("mixed_float16")

inputs = keras.Input(shape=(32,))
hidden = layers.Dense(64, activation="relu")(inputs)
outputs = layers.Dense(10, dtype="float32")(hidden)
model = keras.Model(inputs, outputs)

optimizer = keras.optimizers.Adam(learning_rate=1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = loss_fn(y, logits)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


rng = np.random.RandomState(0)
x_batch = rng.rand(16, 32).astype("float32")
y_batch = rng.randint(0, 10, size=(16,))

if __name__ == "__main__":
    for epoch in range(3):
        train_step(x_batch, y_batch)
