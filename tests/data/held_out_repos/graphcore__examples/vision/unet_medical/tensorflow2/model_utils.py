"""Blocks of the UNet; each convolution takes the dtype chosen on the command line."""

import tensorflow as tf
from tensorflow.keras.layers import Conv2D, Conv2DTranspose


def double_conv_layer(filter_size, x, dtype, name):
    x = Conv2D(filter_size, 3, activation="relu", kernel_initializer="he_normal", dtype=dtype, name=name + "_conv_0")(x)
    x = Conv2D(filter_size, 3, activation="relu", kernel_initializer="he_normal", dtype=dtype, name=name + "_conv_1")(x)
    return x


def up_conv(filter_size, x, name):
    return Conv2DTranspose(filters=filter_size, kernel_size=(2, 2), strides=(2, 2), padding="same", activation=tf.nn.relu, name=name + "_transpose")(x)


def crop(x, size):
    offset = (x.shape[1] - size) // 2
    return x[:, offset : offset + size, offset : offset + size, :]
