"""tf_keras custom loop under mixed_float16 with a plain Adam: no loss scaling."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")

inputs = tf.keras.Input(shape=(32,))
hidden = tf.keras.layers.Dense(64, activation="relu")(inputs)
outputs = tf.keras.layers.Dense(10, dtype="float32")(hidden)
model = tf.keras.Model(inputs, outputs)
optimizer = tf.keras.optimizers.Adam(1e-3)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


rng = np.random.RandomState(0)
x_batch = rng.rand(16, 32).astype("float32")
y_batch = rng.randint(0, 10, size=(16,))

if __name__ == "__main__":
    for epoch in range(3):
        train_step(x_batch, y_batch)
