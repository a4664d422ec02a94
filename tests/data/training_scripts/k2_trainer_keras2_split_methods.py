"""tf_keras: a trainer whose step scales the loss in one method and unscales and clips in another."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf


class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.05))

    def _backprop(self, tape, scaled_loss):
        grads = tape.gradient(scaled_loss, self.model.trainable_variables)
        grads = self.optimizer.get_unscaled_gradients(grads)
        grads, _ = tf.clip_by_global_norm(grads, 5.0)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))

    @tf.function
    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
            scaled_loss = self.optimizer.get_scaled_loss(loss)
        self._backprop(tape, scaled_loss)
        return loss


tf.keras.mixed_precision.set_global_policy("mixed_float16")
trainer = Trainer(
    tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(1, dtype="float32")])
)
rng = np.random.RandomState(0)
x_batch = rng.normal(size=(32, 8)).astype("float32")
y_batch = rng.normal(size=(32, 1)).astype("float32")

if __name__ == "__main__":
    for _ in range(5):
        trainer.train_step(x_batch, y_batch)
