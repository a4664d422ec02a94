"""Keras 3: the step made by a factory that closes over the model and the optimizer."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")


def create_model():
    return keras.Sequential(
        [keras.Input((12,)), keras.layers.Dense(48, activation="tanh"), keras.layers.Dense(3, dtype="float32")]
    )


def make_train_step(model, optimizer, loss_fn):
    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return train_step


net = create_model()
opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))
train_step = make_train_step(net, opt, keras.losses.CategoricalCrossentropy(from_logits=True))

rng = np.random.RandomState(0)
x_batch = rng.normal(size=(24, 12)).astype("float32")
y_batch = np.eye(3, dtype="float32")[rng.randint(0, 3, size=24)]

if __name__ == "__main__":
    for _ in range(5):
        train_step(x_batch, y_batch)
