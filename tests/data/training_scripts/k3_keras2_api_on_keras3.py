"""Keras 3 with the Keras 2 loss-scaling API (get_scaled_loss / get_unscaled_gradients): raises on Keras 3."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")


def build_model():
    return keras.Sequential(
        [
            keras.Input((16,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(4, dtype="float32"),
        ]
    )


model = build_model()
optimizer = keras.optimizers.Adam(1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = loss_fn(y, logits)
        scaled_loss = optimizer.get_scaled_loss(loss)
    scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
    grads = optimizer.get_unscaled_gradients(scaled_grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


rng = np.random.RandomState(0)
x_batch = rng.normal(size=(32, 16)).astype("float32")
y_batch = rng.randint(0, 4, size=(32,)).astype("int32")

if __name__ == "__main__":
    for step in range(10):
        train_step(x_batch, y_batch)
