"""TF1 graph code (pinned to tensorflow-gpu 1.15): on TensorFlow 2.21 build_model() raises AttributeError: module
'tensorflow' has no attribute 'placeholder' (line 7)."""
import tensorflow as tf


def build_model():
    features = tf.placeholder(tf.float16, [None, 8])
    return tf.layers.dense(features, 2)
