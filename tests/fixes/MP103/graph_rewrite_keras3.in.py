# fix-options: --unsafe-fixes
import keras
import tensorflow as tf

model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(10, activation="relu"), keras.layers.Dense(1)])
optimizer = keras.optimizers.Adam()
optimizer = tf.train.experimental.enable_mixed_precision_graph_rewrite(optimizer)
model.compile(optimizer=optimizer, loss="mse")

legacy = tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(keras.optimizers.SGD())
