# coding=utf-8
"""Keras ResNet (reduced: a stem and one residual block)."""

import tensorflow.compat.v2 as tf
from absl import flags

FLAGS = flags.FLAGS


class Resnet(tf.keras.layers.Layer):
    def __init__(self, width_multiplier=1, **kwargs):
        super(Resnet, self).__init__(**kwargs)
        self.stem = tf.keras.layers.Conv2D(16 * width_multiplier, 3, padding="same", use_bias=False)
        self.bn = tf.keras.layers.BatchNormalization()
        self.block = tf.keras.layers.Conv2D(16 * width_multiplier, 3, padding="same", use_bias=False)
        self.pool = tf.keras.layers.GlobalAveragePooling2D()

    def call(self, inputs, training=None):
        x = tf.nn.relu(self.bn(self.stem(inputs), training=training))
        return self.pool(tf.nn.relu(x + self.block(x)))


def resnet(resnet_depth, width_multiplier, cifar_stem=False):
    return Resnet(width_multiplier=width_multiplier)
