"""Keras 3: gradients accumulated over steps and applied later: scaled gradients of steps with different loss
scales would be summed. Refused (issue 19)."""
# fix-refused: gradients are accumulated (accumulate) before apply_gradients
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1, dtype="float32")])
optimizer = keras.optimizers.SGD(0.1)
accumulated = [tf.Variable(tf.zeros_like(v), trainable=False) for v in model.trainable_variables]


def accumulate(grads):
    for slot, g in zip(accumulated, grads):
        slot.assign_add(g)
    return [slot.value() for slot in accumulated]


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    grads = accumulate(grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


x_batch = np.random.RandomState(0).normal(size=(32, 8)).astype("float32")
y_batch = np.random.RandomState(1).normal(size=(32, 1)).astype("float32")
if __name__ == "__main__":
    train_step(x_batch, y_batch)
