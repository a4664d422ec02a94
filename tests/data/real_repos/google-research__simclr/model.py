# coding=utf-8
"""Model function for the TF1 estimator (reduced: the contrastive loss stood in for by a linear head)."""

from __future__ import absolute_import, division, print_function

import tensorflow.compat.v1 as tf
from absl import flags
from tensorflow.compat.v1 import estimator as tf_estimator

FLAGS = flags.FLAGS


def build_model_fn(model, num_classes, num_train_examples):
    def model_fn(features, labels, mode, params=None):
        is_training = mode == tf_estimator.ModeKeys.TRAIN
        hiddens = model(features, is_training=is_training)
        logits = tf.layers.dense(hiddens, num_classes)
        loss = tf.losses.softmax_cross_entropy(labels, logits)
        train_op = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss, global_step=tf.train.get_or_create_global_step())
        return tf_estimator.EstimatorSpec(mode=mode, train_op=train_op, loss=loss)

    return model_fn
