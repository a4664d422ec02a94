"""tf_keras: the model at module level, a LossScaleOptimizer with get_scaled_loss / get_unscaled_gradients."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")


def build_model():
    return tf.keras.Sequential(
        [
            tf.keras.Input((20,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(1, dtype="float32"),
        ]
    )


model = build_model()
optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(1e-3))
loss_fn = tf.keras.losses.MeanSquaredError()


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
        scaled_loss = optimizer.get_scaled_loss(loss)
    scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
    grads = optimizer.get_unscaled_gradients(scaled_grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


rng = np.random.RandomState(0)
x_batch = rng.normal(size=(32, 20)).astype("float32")
y_batch = rng.normal(size=(32, 1)).astype("float32")

if __name__ == "__main__":
    for epoch in range(5):
        train_step(x_batch, y_batch)
