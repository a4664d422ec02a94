"""Keras 3: a tape wrapper spelled like Horovod's DistributedGradientTape whose gradient() is NOT linear: it clips
every gradient to [-1, 1] (a stand-in for a wrapper that compresses or clips). Statically it looks like the all-reduce
that commutes with the loss scale, so MP501's rewrite (wrap the optimizer, differentiate the scaled loss through the
wrapper) is proposed; one step of the rewritten file clips the scaled gradients and then divides them by 2**15, and
moves the weights ~1e-5 times as far as the float32 step. With the trace on, --fix must not apply it (issue 19)."""

import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1, dtype="float32")])
optimizer = keras.optimizers.SGD(0.1)


class DistributedGradientTape:
    """Not Horovod's: clips what it returns."""

    def __init__(self, tape):
        self._tape = tape

    def gradient(self, target, sources):
        return [tf.clip_by_value(g, -1.0, 1.0) for g in self._tape.gradient(target, sources)]


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    tape = DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
