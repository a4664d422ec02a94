# fix-options: --keras-version 2
"""NVIDIA's ELECTRA / MaskRCNN set the policy with the TF 2.2-2.8 experimental API and its loss_scale (issue 30):
the current Policy takes no loss_scale (compile wraps the optimizer in a dynamic LossScaleOptimizer itself), so
renaming it alone still raises on TF 2.21; the fix drops the argument."""
import numpy as np
import tensorflow as tf

policy = tf.keras.mixed_precision.Policy("mixed_float16")
tf.keras.mixed_precision.set_global_policy(policy)
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16), tf.keras.layers.Dense(1, dtype="float32")])
model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
x_batch = np.random.RandomState(0).normal(size=(32, 8)).astype("float32")
y_batch = np.random.RandomState(1).normal(size=(32, 1)).astype("float32")


def train_step(x, y):
    return model.train_on_batch(x, y)
