"""tf_keras: a trainer class with self.model and self.optimizer (a LossScaleOptimizer), made at module level."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")


class Trainer:
    def __init__(self, model, lr=1e-3):
        self.model = model
        self.optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(lr))
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = self.loss_fn(y, self.model(x, training=True))
            scaled = self.optimizer.get_scaled_loss(loss)
        grads = self.optimizer.get_unscaled_gradients(tape.gradient(scaled, self.model.trainable_variables))
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


def build_model():
    return keras.Sequential(
        [keras.Input((10,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(5, dtype="float32")]
    )


trainer = Trainer(build_model())
rng = np.random.RandomState(0)
x_batch = rng.normal(size=(32, 10)).astype("float32")
y_batch = rng.randint(0, 5, size=(32,))

if __name__ == "__main__":
    for _ in range(3):
        trainer.train_step(x_batch, y_batch)
