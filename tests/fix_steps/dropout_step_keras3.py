"""Keras 3: a step with dropout (training=True). float16 and float32 inputs draw different dropout masks from the
same seed, so the step check turns dropout off for its comparison (issue 30): loss scaling is the same with or
without it, and MP501's fix is verified by the training step."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dropout(0.5), keras.layers.Dense(1, dtype="float32")])
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
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    tape = DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

