# fix-options: --unsafe-fixes
"""Keras 3: a LossScaleOptimizer whose apply() divides by the loss scale, but the loss is never scaled."""
import numpy as np
import tensorflow as tf
import keras

keras.mixed_precision.set_global_policy("mixed_float16")

model = keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(1, dtype="float32")])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
x = np.random.rand(32, 8).astype("float32")
y = np.random.rand(32, 1).astype("float32")

for step in range(10):
    with tf.GradientTape() as tape:
        loss = keras.ops.mean(keras.ops.square(model(x, training=True) - y))
        scaled_loss = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    optimizer.apply(grads, model.trainable_variables)
