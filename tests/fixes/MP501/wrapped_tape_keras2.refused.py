"""tf_keras: the tape is wrapped by a class of the project's own whose gradient() clips: loss scaling through it
would clip scaled gradients. Which wrappers are linear is not knowable here: refused (issue 19)."""
# fix-refused: gradients come from a wrapped tape (ClippingTape(tape)) that may transform them
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
model = tf.keras.Sequential(
    [tf.keras.Input((8,)), tf.keras.layers.Dense(16), tf.keras.layers.Dense(1, dtype="float32")]
)
optimizer = tf.keras.optimizers.SGD(0.1)


class ClippingTape:
    def __init__(self, tape):
        self._tape = tape

    def gradient(self, target, sources):
        return [tf.clip_by_value(g, -1.0, 1.0) for g in self._tape.gradient(target, sources)]


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    tape = ClippingTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


x_batch = np.random.RandomState(0).normal(size=(32, 8)).astype("float32")
y_batch = np.random.RandomState(1).normal(size=(32, 1)).astype("float32")
if __name__ == "__main__":
    train_step(x_batch, y_batch)
