# coding=utf-8
"""TF1 ResNet building blocks (reduced: one stem and one residual block)."""

from __future__ import absolute_import, division, print_function

import tensorflow.compat.v1 as tf
from absl import flags

FLAGS = flags.FLAGS
BATCH_NORM_DECAY = 0.9


def batch_norm_relu(inputs, is_training, relu=True, init_zero=False, data_format="channels_last"):
    inputs = tf.layers.batch_normalization(inputs=inputs, axis=-1, momentum=BATCH_NORM_DECAY, training=is_training, gamma_initializer=tf.zeros_initializer() if init_zero else tf.ones_initializer())
    return tf.nn.relu(inputs) if relu else inputs


def conv2d_fixed_padding(inputs, filters, kernel_size, strides, data_format="channels_last"):
    return tf.layers.conv2d(inputs=inputs, filters=filters, kernel_size=kernel_size, strides=strides, padding="SAME", use_bias=False, kernel_initializer=tf.variance_scaling_initializer())


def resnet_v1(resnet_depth, width_multiplier, cifar_stem=False, data_format="channels_last"):
    def model(inputs, is_training):
        inputs = conv2d_fixed_padding(inputs, 16 * width_multiplier, 3, 1)
        inputs = batch_norm_relu(inputs, is_training)
        shortcut = inputs
        inputs = conv2d_fixed_padding(inputs, 16 * width_multiplier, 3, 1)
        inputs = batch_norm_relu(inputs, is_training, relu=False, init_zero=True)
        inputs = tf.nn.relu(inputs + shortcut)
        return tf.reduce_mean(inputs, [1, 2])

    return model
