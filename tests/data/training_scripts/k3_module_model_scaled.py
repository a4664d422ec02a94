"""Keras 3: the model built by a function and kept at module level, a LossScaleOptimizer, a tf.function step."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")


def build_model():
    inputs = keras.Input((20,))
    x = keras.layers.Dense(64, activation="relu")(inputs)
    x = keras.layers.Dense(64, activation="relu")(x)
    outputs = keras.layers.Dense(1, dtype="float32")(x)
    return keras.Model(inputs, outputs)


model = build_model()
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
loss_fn = keras.losses.MeanSquaredError()


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
        scaled_loss = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


rng = np.random.RandomState(0)
x_batch = rng.normal(size=(32, 20)).astype("float32")
y_batch = rng.normal(size=(32, 1)).astype("float32")

if __name__ == "__main__":
    for epoch in range(5):
        print(epoch, float(train_step(x_batch, y_batch)))
