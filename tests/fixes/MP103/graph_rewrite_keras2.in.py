# fix-options: --unsafe-fixes
"""tf_keras: the TF1 graph rewrite on a Keras optimizer (AttributeError in TF2)."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import tensorflow as tf
from tensorflow import keras

model = keras.Sequential([keras.layers.Dense(16, activation="relu", input_shape=(8,)), keras.layers.Dense(1)])
opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(keras.optimizers.Adam(1e-3))
model.compile(optimizer=opt, loss="mse")
