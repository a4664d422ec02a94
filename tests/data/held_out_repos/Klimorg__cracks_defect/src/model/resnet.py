"""A pre-activation ResNet classifier with a softmax head."""

from typing import List, Optional, Tuple

import tensorflow as tf
from tensorflow.keras import Model
from tensorflow.keras.layers import Activation, Add, BatchNormalization, Conv2D, Dense, GlobalAvgPool2D, Input, ReLU

size_one = (1, 1)


def bn_relu_conv(tensor: tf.Tensor, filters: int, kernel_size: Tuple[int, int], strides: Tuple[int, int]) -> tf.Tensor:
    img = BatchNormalization()(tensor)
    img = ReLU()(img)
    return Conv2D(filters=filters, kernel_size=kernel_size, strides=strides, padding="same", use_bias=False)(img)


def bottleneck_block(tensor: tf.Tensor, filters: int, strides: Tuple[int, int], repets: int) -> tf.Tensor:
    shortcut = Conv2D(filters=filters, kernel_size=size_one, strides=strides, padding="same", use_bias=False)(tensor)
    img = bn_relu_conv(tensor, filters // 4, kernel_size=size_one, strides=strides)
    img = bn_relu_conv(img, filters // 4, kernel_size=(3, 3), strides=size_one)
    img = Add()([shortcut, bn_relu_conv(img, filters, kernel_size=size_one, strides=size_one)])
    for _ in range(repets - 1):
        inner = bn_relu_conv(img, filters // 4, kernel_size=size_one, strides=size_one)
        inner = bn_relu_conv(inner, filters // 4, kernel_size=(3, 3), strides=size_one)
        img = Add()([bn_relu_conv(inner, filters, kernel_size=size_one, strides=size_one), img])
    return img


def get_cnn(img_shape: List[int], n_classes: Optional[int], repets: int) -> tf.keras.Model:
    img_input = Input(img_shape)
    img = Conv2D(filters=16, kernel_size=(3, 3), padding="same", use_bias=False)(img_input)
    img = bottleneck_block(img, filters=64, repets=repets, strides=size_one)
    img = bottleneck_block(img, filters=128, repets=repets, strides=(2, 2))
    img = bottleneck_block(img, filters=256, repets=repets, strides=(2, 2))
    img = BatchNormalization()(img)
    img = ReLU()(img)

    img = GlobalAvgPool2D()(img)
    img = Dense(n_classes)(img)
    output = Activation("softmax")(img)

    return Model(img_input, output)
