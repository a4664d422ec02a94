import tensorflow as tf


def make_optimizer(learning_rate, amp):
    optimizer = tf.compat.v1.train.AdamOptimizer(learning_rate=learning_rate)
    if amp:
        loss_scale = tf.train.experimental.DynamicLossScale()
        optimizer = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(optimizer, loss_scale)
    return optimizer
