"""Keras 3: a step that augments its batch with noise from a tf.random.Generator (a module-level generator: its
state moves on at every call, whatever the global seed). Two float32 steps from the same weights differ, so one step
of the fixed file cannot be compared with the float32 step: the step check says so and claims nothing, and MP501's
fix is applied as re-traced, not refused (prefer silence to a wrong refusal)."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1, dtype="float32")])
optimizer = keras.optimizers.SGD(0.1)
noise = tf.random.Generator.from_seed(1)


class DistributedGradientTape:
    """Stand-in for horovod.tensorflow.DistributedGradientTape (average over the workers: one here)."""

    def __init__(self, tape):
        self._tape = tape

    def gradient(self, target, sources):
        return [g / 1.0 for g in self._tape.gradient(target, sources)]


@tf.function
def train_step(x, y):
    x = x + noise.normal(tf.shape(x), stddev=1.0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    tape = DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
