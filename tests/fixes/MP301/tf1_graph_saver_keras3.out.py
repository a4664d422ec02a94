# fix-options: --unsafe-fixes
"""TF1 graph code in a Keras 3 project: a float16 graph restores a float32 checkpoint saved by another graph (fails),
and a float16 graph restores its own float16 checkpoint (works)."""
import numpy as np
import tensorflow as tf
import keras  # the Keras 3 model code lives elsewhere in this project
from tensorflow.python.training.saver import BaseSaverBuilder


class CastOnRestoreSaverBuilder(BaseSaverBuilder):
    """Restores float16/bfloat16 variables from float32 checkpoint values and casts them (mpdoctor MP301 fix)."""

    def bulk_restore(self, filename_tensor, saveables, preferred_shard, restore_sequentially):
        from tensorflow.python.ops import io_ops

        specs = [spec for saveable in saveables for spec in saveable.specs]
        stored = [tf.float32 if spec.dtype in (tf.float16, tf.bfloat16) else spec.dtype for spec in specs]
        with tf.device("cpu:0"):
            restored = io_ops.restore_v2(filename_tensor, [spec.name for spec in specs],
                                         [spec.slice_spec for spec in specs], stored)
        return [tf.cast(value, spec.dtype) for value, spec in zip(restored, specs)]


CKPT = "/tmp/pretrained/model.ckpt"


def export_float32():
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        w = tf.compat.v1.get_variable("w", shape=[4, 4], dtype=tf.float32)
        b = tf.compat.v1.get_variable("b", shape=[4], initializer=tf.compat.v1.zeros_initializer())
        saver = tf.compat.v1.train.Saver()
        sess.run(tf.compat.v1.global_variables_initializer())
        saver.save(sess, CKPT)


def half_inference(batch):
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float16, shape=[None, 4])
        w = tf.compat.v1.get_variable("w", shape=[4, 4], dtype=tf.float16)
        b = tf.compat.v1.get_variable("b", shape=[4], dtype=tf.float16)
        y = tf.nn.relu(tf.matmul(x, w) + b)
        saver = tf.compat.v1.train.Saver(builder=CastOnRestoreSaverBuilder())
        with tf.compat.v1.Session() as sess:
            saver.restore(sess, CKPT)
            return sess.run(y, {x: batch.astype(np.float16)})


def half_roundtrip():
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        w = tf.compat.v1.get_variable("w", shape=[4, 4], dtype=tf.float16)
        saver = tf.compat.v1.train.Saver()
        sess.run(tf.compat.v1.global_variables_initializer())
        path = saver.save(sess, "/tmp/half/model.ckpt")
        saver.restore(sess, path)


export_float32()
print(half_inference(np.ones((2, 4))))
half_roundtrip()
