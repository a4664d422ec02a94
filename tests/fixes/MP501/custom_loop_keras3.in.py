# fix-options: --unsafe-fixes
"""A Keras 3 custom training loop under mixed_float16 with a plain Adam: no loss scaling at all."""
import numpy as np
import tensorflow as tf
import keras
from keras import layers

keras.mixed_precision.set_global_policy("mixed_float16")

inputs = keras.Input(shape=(32,))
x = layers.Dense(64, activation="relu")(inputs)
outputs = layers.Dense(10, dtype="float32")(x)
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


dataset = tf.data.Dataset.from_tensor_slices(
    (np.random.rand(64, 32).astype("float32"), np.random.randint(0, 10, 64))).batch(16)
for epoch in range(2):
    for xb, yb in dataset:
        loss = train_step(xb, yb)
