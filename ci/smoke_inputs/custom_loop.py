"""Smoke input (MP501): a custom training loop under mixed_float16 that never scales the loss, so small float16
gradients flush to zero. The loop is a function (nothing trains on import); the trace runs the model once."""
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")

model = tf.keras.Sequential([
    tf.keras.Input(shape=(8,)),
    tf.keras.layers.Dense(16, activation="relu"),
    tf.keras.layers.Dense(1, dtype="float32"),
])
optimizer = tf.keras.optimizers.SGD(0.01)
loss_fn = tf.keras.losses.MeanSquaredError()


def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
