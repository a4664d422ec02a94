# fix-options: --target-tensorflow >=2.16
"""A tf_keras step ported to Keras 3 that accumulates the unscaled gradients (NVIDIA ELECTRA, TensorFlowTTS):
dropping get_unscaled_gradients would sum scaled gradients of steps with different loss scales (issue 19)."""
# fix-refused: gradients are accumulated (accumulator) before apply_gradients
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1, dtype="float32")])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
slots = [tf.Variable(tf.zeros_like(v), trainable=False) for v in model.trainable_variables]


def accumulator(grads):
    for slot, g in zip(slots, grads):
        slot.assign_add(g)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        scaled_loss = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
    accumulator(grads)
    optimizer.apply_gradients(zip(slots, model.trainable_variables))
    return loss


x_batch = np.random.RandomState(0).normal(size=(32, 8)).astype("float32")
y_batch = np.random.RandomState(1).normal(size=(32, 1)).astype("float32")
if __name__ == "__main__":
    train_step(x_batch, y_batch)
