from tensorflow.keras.layers import *  # noqa: F403
from tensorflow.keras.models import *  # noqa: F403


def conv_block(x, filters):
    x = Conv2D(filters=filters, kernel_size=(3, 3), padding="same", kernel_initializer="he_normal")(x)  # noqa: F405
    return Activation("relu")(x)  # noqa: F405


def conv_block_bn(x, filters):
    x = Conv2D(filters=filters, kernel_size=(3, 3), padding="same", use_bias=False)(x)  # noqa: F405
    x = BatchNormalization()(x)  # noqa: F405
    return Activation("relu")(x)  # noqa: F405


def get_mini_vgg(use_bn=True):
    inputs = Input((96, 96, 3))  # noqa: F405
    x = conv_block_bn(inputs, 32) if use_bn else conv_block(inputs, 32)
    x = MaxPooling2D(pool_size=(2, 2))(x)  # noqa: F405
    x = conv_block_bn(x, 64) if use_bn else conv_block(x, 64)
    x = MaxPooling2D(pool_size=(2, 2))(x)  # noqa: F405
    x = GlobalAveragePooling2D()(x)  # noqa: F405
    outputs = Dense(5, activation="softmax")(x)  # noqa: F405
    return Model(inputs, outputs)  # noqa: F405
