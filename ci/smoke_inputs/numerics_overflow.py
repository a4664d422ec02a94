"""Smoke input (MP404): activations beyond float16's range (65504) on an ordinary batch: the float16 run gives
inf where the float32 run stays finite."""
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")

inputs = tf.keras.Input(shape=(16,))
scaled = tf.keras.layers.Dense(8, kernel_initializer=tf.keras.initializers.Constant(20000.0), name="scale")(inputs)
outputs = tf.keras.layers.Dense(1, dtype="float32")(scaled)
model = tf.keras.Model(inputs, outputs)
