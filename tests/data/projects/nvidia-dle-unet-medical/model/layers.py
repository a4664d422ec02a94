# Abridged excerpt (see SOURCE.md): NVIDIA DeepLearningExamples, TensorFlow2/Segmentation/UNet_Medical/model/layers.py.
"""The UNet blocks: unpadded 3x3 convolutions, pooling, transposed convolutions; a 1x1 output convolution."""

import tensorflow as tf


def _crop_and_concat(inputs, residual_input):
    factor = inputs.shape[1] / residual_input.shape[1]
    return tf.concat([inputs, tf.image.central_crop(residual_input, factor)], axis=-1)


class InputBlock(tf.keras.Model):
    def __init__(self, filters):
        super().__init__(self)
        self.conv1 = tf.keras.layers.Conv2D(filters=filters, kernel_size=(3, 3), activation=tf.nn.relu)
        self.conv2 = tf.keras.layers.Conv2D(filters=filters, kernel_size=(3, 3), activation=tf.nn.relu)
        self.maxpool = tf.keras.layers.MaxPool2D(pool_size=(2, 2), strides=2)

    def call(self, inputs):
        out = self.conv2(self.conv1(inputs))
        return self.maxpool(out), out


class DownsampleBlock(tf.keras.Model):
    def __init__(self, filters, idx):
        super().__init__(self)
        self.conv1 = tf.keras.layers.Conv2D(filters=filters, kernel_size=(3, 3), activation=tf.nn.relu)
        self.conv2 = tf.keras.layers.Conv2D(filters=filters, kernel_size=(3, 3), activation=tf.nn.relu)
        self.maxpool = tf.keras.layers.MaxPool2D(pool_size=(2, 2), strides=2)

    def call(self, inputs):
        out = self.conv2(self.conv1(inputs))
        return self.maxpool(out), out


class BottleneckBlock(tf.keras.Model):
    def __init__(self, filters):
        super().__init__(self)
        self.conv1 = tf.keras.layers.Conv2D(filters=filters, kernel_size=(3, 3), activation=tf.nn.relu)
        self.conv2 = tf.keras.layers.Conv2D(filters=filters, kernel_size=(3, 3), activation=tf.nn.relu)
        self.dropout = tf.keras.layers.Dropout(rate=0.5)
        self.conv_transpose = tf.keras.layers.Conv2DTranspose(
            filters=filters // 2, kernel_size=(3, 3), strides=(2, 2), padding="same", activation=tf.nn.relu
        )

    def call(self, inputs, training):
        out = self.dropout(self.conv2(self.conv1(inputs)), training=training)
        return self.conv_transpose(out)


class UpsampleBlock(tf.keras.Model):
    def __init__(self, filters, idx):
        super().__init__(self)
        self.conv1 = tf.keras.layers.Conv2D(filters=filters, kernel_size=(3, 3), activation=tf.nn.relu)
        self.conv2 = tf.keras.layers.Conv2D(filters=filters, kernel_size=(3, 3), activation=tf.nn.relu)
        self.conv_transpose = tf.keras.layers.Conv2DTranspose(
            filters=filters // 2, kernel_size=(3, 3), strides=(2, 2), padding="same", activation=tf.nn.relu
        )

    def call(self, inputs, residual_input):
        out = _crop_and_concat(inputs, residual_input)
        return self.conv_transpose(self.conv2(self.conv1(out)))


class OutputBlock(tf.keras.Model):
    def __init__(self, filters, n_classes):
        super().__init__(self)
        self.conv1 = tf.keras.layers.Conv2D(filters=filters, kernel_size=(3, 3), activation=tf.nn.relu)
        self.conv2 = tf.keras.layers.Conv2D(filters=filters, kernel_size=(3, 3), activation=tf.nn.relu)
        self.conv3 = tf.keras.layers.Conv2D(filters=n_classes, kernel_size=(1, 1), activation=None)

    def call(self, inputs, residual_input):
        out = _crop_and_concat(inputs, residual_input)
        return self.conv3(self.conv2(self.conv1(out)))
