# fix-options: --unsafe-fixes
import keras
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")

model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(10, activation="relu"), keras.layers.Dense(1)])
optimizer = keras.optimizers.Adam()
optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
model.compile(optimizer=optimizer, loss="mse")

legacy = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD())
