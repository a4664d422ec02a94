# coding=utf-8
"""Model specification for SimCLR (reduced: projection head and supervised head only)."""

import tensorflow.compat.v2 as tf
from absl import flags

import resnet

FLAGS = flags.FLAGS


def build_optimizer(learning_rate):
    return tf.keras.optimizers.SGD(learning_rate, 0.9, nesterov=True)


class ProjectionHead(tf.keras.layers.Layer):
    def __init__(self, out_dim=16, **kwargs):
        super(ProjectionHead, self).__init__(**kwargs)
        self.linear = tf.keras.layers.Dense(out_dim)

    def call(self, inputs, training=None):
        return self.linear(inputs)


class Model(tf.keras.models.Model):
    """Resnet model with projection or supervised layer."""

    def __init__(self, num_classes, **kwargs):
        super(Model, self).__init__(**kwargs)
        self.resnet_model = resnet.resnet(resnet_depth=FLAGS.resnet_depth, width_multiplier=FLAGS.width_multiplier)
        self._projection_head = ProjectionHead()
        self.supervised_head = tf.keras.layers.Dense(num_classes)

    def call(self, inputs, training=None):
        hiddens = self.resnet_model(inputs, training=training)
        return self._projection_head(hiddens, training=training), self.supervised_head(tf.stop_gradient(hiddens))
