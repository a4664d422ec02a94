"""Smoke input (MP401, trace form): a classifier under mixed_float16 whose softmax head computes in float16.
Written against tf.keras, so it runs on every supported Keras line."""
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")

inputs = tf.keras.Input(shape=(16,))
hidden = tf.keras.layers.Dense(32, activation="relu")(inputs)
outputs = tf.keras.layers.Dense(10, activation="softmax")(hidden)
model = tf.keras.Model(inputs, outputs)
