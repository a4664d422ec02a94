"""A plain bug in TF1-targeted code: it raises NameError: name 'num_clases' is not defined (line 9) on any TensorFlow."""
import tensorflow as tf

num_classes = 10


def build_model():
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    return tf.keras.Sequential([tf.keras.layers.Dense(num_clases, dtype="float32")])
