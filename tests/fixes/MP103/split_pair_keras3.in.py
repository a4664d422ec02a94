# fix-options: --target-tensorflow >=2.16
"""A trainer class whose step scales the loss in one method and unscales the gradients in another (issue 30): the
Keras 3 port rewrites both halves together."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")


class Trainer:
    def __init__(self):
        self.model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1, dtype="float32")])
        self.optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))

    def _train_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x) - y))
            scaled_loss = self.optimizer.get_scaled_loss(loss)
        self._backprop_loss(tape, scaled_loss)
        return loss

    def _backprop_loss(self, tape, scaled_loss):
        grads = tape.gradient(scaled_loss, self.model.trainable_variables)
        grads = self.optimizer.get_unscaled_gradients(grads)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))


trainer = Trainer()
model = trainer.model


def train_step(x, y):
    return trainer._train_step(x, y)


x_batch = np.random.RandomState(0).normal(size=(32, 8)).astype("float32")
y_batch = np.random.RandomState(1).normal(size=(32, 1)).astype("float32")
