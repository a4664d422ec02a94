import tensorflow as tf


def create_optimizer(loss, learning_rate, manual_fp16, use_fp16, init_loss_scale=2 ** 32):
    optimizer = tf.train.AdamOptimizer(learning_rate)
    if use_fp16:
        loss_scaler = tf.train.experimental.DynamicLossScale(initial_loss_scale=init_loss_scale)
        optimizer = tf.train.experimental.enable_mixed_precision_graph_rewrite(optimizer, loss_scaler)
    if manual_fp16:
        manager = tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(init_loss_scale=init_loss_scale)
        optimizer = tf.contrib.mixed_precision.LossScaleOptimizer(optimizer, manager)
    return optimizer.minimize(loss, global_step=tf.train.get_or_create_global_step())
