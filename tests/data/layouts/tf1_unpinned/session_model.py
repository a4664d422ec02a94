"""TF1 session code with no declared TensorFlow: on TensorFlow 2.21 it raises AttributeError: module 'tensorflow'
has no attribute 'Session' (line 8)."""
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
inputs = tf.keras.Input((8,))
model = tf.keras.Model(inputs, tf.keras.layers.Dense(2, dtype="float32")(inputs))
session = tf.Session()
