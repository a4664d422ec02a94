# fix-options: --unsafe-fixes
"""Keras 3: the tape wrapped in a Horovod-style DistributedGradientTape (a stand-in with Horovod's interface: its
gradient() all-reduces, here over one worker). The all-reduce is a linear average: it commutes with the loss
scale, so differentiating the scaled loss through it and letting the LossScaleOptimizer unscale is right (the
pattern Horovod documents)."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1, dtype="float32")])
optimizer = keras.optimizers.SGD(0.1)


class DistributedGradientTape:
    """Stand-in for horovod.tensorflow.DistributedGradientTape (average over the workers: one here)."""

    def __init__(self, tape):
        self._tape = tape

    def gradient(self, target, sources):
        return [g / 1.0 for g in self._tape.gradient(target, sources)]


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    tape = DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


x_batch = np.random.RandomState(0).normal(size=(32, 8)).astype("float32")
y_batch = np.random.RandomState(1).normal(size=(32, 1)).astype("float32")
if __name__ == "__main__":
    train_step(x_batch, y_batch)
