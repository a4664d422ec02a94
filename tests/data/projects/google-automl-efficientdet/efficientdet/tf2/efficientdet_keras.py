# Abridged excerpt (see SOURCE.md): google/automl efficientdet/tf2/efficientdet_keras.py.
"""EfficientDet keras network (class and box heads only in this excerpt)."""

import tensorflow as tf


class ClassNet(tf.keras.layers.Layer):
    def __init__(self, num_classes=90, num_anchors=9, num_filters=32, name="class_net"):
        super().__init__(name=name)
        self.conv = tf.keras.layers.SeparableConv2D(num_filters, kernel_size=3, padding="same")
        self.classes = tf.keras.layers.SeparableConv2D(num_classes * num_anchors, kernel_size=3, padding="same")

    def call(self, inputs):
        return self.classes(tf.nn.swish(self.conv(inputs)))


class BoxNet(tf.keras.layers.Layer):
    def __init__(self, num_anchors=9, num_filters=32, name="box_net"):
        super().__init__(name=name)
        self.conv = tf.keras.layers.SeparableConv2D(num_filters, kernel_size=3, padding="same")
        self.boxes = tf.keras.layers.SeparableConv2D(4 * num_anchors, kernel_size=3, padding="same")

    def call(self, inputs):
        return self.boxes(tf.nn.swish(self.conv(inputs)))


class EfficientDetNet(tf.keras.Model):
    """EfficientDet keras network without pre/post-processing."""

    def __init__(self, model_name=None, config=None, name=""):
        super().__init__(name=name)
        self.config = config
        self.class_net = ClassNet(num_classes=config.num_classes)
        self.box_net = BoxNet()

    def call(self, feats, training=False):
        return self.class_net(feats), self.box_net(feats)
