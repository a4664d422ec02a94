"""Losses: labels and logits are cast to float32 before anything else."""

import tensorflow as tf


def cast_flatten(y_true, y_pred):
    n_classes = y_pred.shape[-1]
    flat_labels = tf.reshape(tf.cast(y_true, tf.float32), [tf.shape(input=y_pred)[0], -1, n_classes])
    flat_logits = tf.reshape(tf.cast(y_pred, tf.float32), [tf.shape(input=y_pred)[0], -1, n_classes])
    return flat_labels, flat_logits


def dice_coef_fn(y_true, y_pred, axis=1, eps=1e-6):
    intersection = tf.reduce_sum(input_tensor=y_pred * y_true, axis=axis)
    union = tf.reduce_sum(input_tensor=y_pred * y_pred + y_true * y_true, axis=axis)
    return tf.reduce_mean(input_tensor=(2.0 * intersection + eps) / (union + eps), axis=0)


def ce_loss(y_true, y_pred):
    y_true, y_pred = cast_flatten(y_true, y_pred)
    return tf.reduce_mean(input_tensor=tf.nn.softmax_cross_entropy_with_logits(logits=y_pred, labels=y_true))


def dice_coef_loss_fn(y_true, y_pred):
    y_true, y_pred = cast_flatten(y_true, y_pred)
    return tf.reduce_mean(input_tensor=1 - dice_coef_fn(y_true, tf.keras.activations.softmax(y_pred, axis=-1)))


def dice_ce_loss(y_true, y_pred):
    return ce_loss(y_true, y_pred) + dice_coef_loss_fn(y_true, y_pred)


def dice_coef_accuracy_fn(y_true, y_pred):
    return 1 - dice_coef_loss_fn(y_true, y_pred)
