"""Keras 3 with the Keras 2 API split over two methods: `_train_step` scales the loss, `_backprop_loss` unscales
the gradients and clips them (raises on Keras 3: its LossScaleOptimizer has neither method)."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")


class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))

    def _backprop_loss(self, tape, scaled_loss):
        grads = tape.gradient(scaled_loss, self.model.trainable_variables)
        grads = self.optimizer.get_unscaled_gradients(grads)
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))

    @tf.function
    def _train_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
            scaled_loss = self.optimizer.get_scaled_loss(loss)
        self._backprop_loss(tape, scaled_loss)
        return loss


trainer = Trainer(
    keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1, dtype="float32")])
)
rng = np.random.RandomState(0)
x_batch = rng.normal(size=(32, 8)).astype("float32")
y_batch = rng.normal(size=(32, 1)).astype("float32")

if __name__ == "__main__":
    for _ in range(5):
        trainer._train_step(x_batch, y_batch)
