"""TF1 graph code through tf.compat.v1, without disable_eager_execution(): on TensorFlow 2.21 it raises RuntimeError:
tf.placeholder() is not compatible with eager execution. (line 5)."""
import tensorflow as tf

features = tf.compat.v1.placeholder(tf.float16, [None, 8])
logits = tf.compat.v1.layers.dense(features, 2)
