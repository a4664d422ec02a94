"""tf_keras: a step factory closing over a model with Dropout, a LossScaleOptimizer."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf


def get_model():
    return tf.keras.Sequential(
        [
            tf.keras.Input((12,)),
            tf.keras.layers.Dense(48, activation="relu"),
            tf.keras.layers.Dropout(0.2),
            tf.keras.layers.Dense(3, dtype="float32"),
        ]
    )


def make_train_step(model, optimizer):
    loss_fn = tf.keras.losses.CategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled = optimizer.get_scaled_loss(loss)
        grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return train_step


tf.keras.mixed_precision.set_global_policy("mixed_float16")
model = get_model()
train_step = make_train_step(model, tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.05)))

rng = np.random.RandomState(0)
x_batch = rng.normal(size=(24, 12)).astype("float32")
y_batch = np.eye(3, dtype="float32")[rng.randint(0, 3, size=24)]

if __name__ == "__main__":
    for _ in range(5):
        train_step(x_batch, y_batch)
