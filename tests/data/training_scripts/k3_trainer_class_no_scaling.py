"""Keras 3: a trainer class whose step applies a plain optimizer under mixed_float16 (no loss scaling)."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")


class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = keras.optimizers.RMSprop(1e-3)

    @tf.function
    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            pred = self.model(x, training=True)
            loss = tf.reduce_mean(tf.square(pred - y))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2, dtype="float32")])
trainer = Trainer(model)
rng = np.random.RandomState(0)
x_batch = rng.normal(size=(32, 6)).astype("float32")
y_batch = rng.normal(size=(32, 2)).astype("float32")

if __name__ == "__main__":
    for _ in range(4):
        trainer.train_step(x_batch, y_batch)
