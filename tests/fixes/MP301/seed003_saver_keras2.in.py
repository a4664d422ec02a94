# fix-options: --unsafe-fixes
"""Seed 003 (question): a float32 checkpoint restored into a float16 TF1 graph with a plain Saver.
Fails with "tensor_name = dense/bias:0; expected dtype half does not equal original dtype float"."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # tf.compat.v1.layers needs tf_keras on TF >= 2.16

import tensorflow as tf

tf.compat.v1.disable_eager_execution()

A = tf.compat.v1.get_variable(name='foo', shape=[3, 3], dtype=tf.float32)
dense = tf.compat.v1.layers.dense(inputs=A, units=3)
varis = tf.compat.v1.trainable_variables(scope=None)
print(varis[1])  # <tf.Variable 'dense/kernel:0' shape=(3, 3) dtype=float32_ref>
assign = dict([(vari.name, vari) for vari in varis])
saver = tf.compat.v1.train.Saver(assign)

with tf.compat.v1.Session() as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    print(sess.run(dense))
    save_path = saver.save(sess, "tmp.ckpt")

tf.compat.v1.reset_default_graph()
A = tf.compat.v1.get_variable(name='foo', shape=[3, 3], dtype=tf.float16)
dense = tf.compat.v1.layers.dense(inputs=A, units=3)
varis = tf.compat.v1.trainable_variables(scope=None)
print(varis[1])  # <tf.Variable 'dense/kernel:0' shape=(3, 3) dtype=float16_ref>
assign = dict([(vari.name, vari) for vari in varis])
saver = tf.compat.v1.train.Saver(assign)

with tf.compat.v1.Session() as sess:
    saver.restore(sess, "tmp.ckpt")
    print(sess.run(dense))
