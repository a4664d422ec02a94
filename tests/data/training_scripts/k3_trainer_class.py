"""Keras 3: a trainer class holding self.model and self.optimizer, made at module level."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")


def build_classifier(num_classes=5):
    return keras.Sequential(
        [
            keras.Input((10,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(num_classes, dtype="float32"),
        ]
    )


class Trainer:
    def __init__(self, model, learning_rate=1e-3):
        self.model = model
        self.optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(learning_rate))
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = self.loss_fn(y, self.model(x, training=True))
            scaled_loss = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss

    def fit(self, x, y, epochs=3):
        for _ in range(epochs):
            self.train_step(x, y)


trainer = Trainer(build_classifier())
rng = np.random.RandomState(0)
x_batch = rng.normal(size=(32, 10)).astype("float32")
y_batch = rng.randint(0, 5, size=(32,))

if __name__ == "__main__":
    trainer.fit(x_batch, y_batch)
