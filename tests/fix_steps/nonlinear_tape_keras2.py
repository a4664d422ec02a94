"""tf_keras: a tape wrapper spelled like Horovod's DistributedGradientTape whose gradient() is NOT linear: it clips
every gradient to [-1, 1]. Statically it looks like the all-reduce that commutes with the loss scale, so MP501's
rewrite (LossScaleOptimizer, get_scaled_loss through the wrapper, get_unscaled_gradients after it) is proposed; the
wrapper then clips the scaled gradients before they are unscaled, and one step of the rewritten file moves the
weights ~1e-5 times as far as the float32 step. With the trace on, --fix must not apply it (issue 19)."""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
model = tf.keras.Sequential(
    [tf.keras.Input((8,)), tf.keras.layers.Dense(16), tf.keras.layers.Dense(1, dtype="float32")]
)
optimizer = tf.keras.optimizers.SGD(0.1)


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
