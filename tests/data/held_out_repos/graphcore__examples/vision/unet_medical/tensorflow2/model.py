"""The UNet graph: encoder, decoder and a 1x1 convolution that returns logits."""

import tensorflow as tf
from tensorflow.keras.layers import Conv2D, Input, MaxPooling2D

from model_utils import crop, double_conv_layer, up_conv


def encoder(x, filters, crop_sizes, args):
    skip_connections = []
    for i, filter in enumerate(filters):
        conv = double_conv_layer(filter, x, args.dtype, f"encoder_block_{i}")
        if i <= 3:
            skip_connections.append(crop(conv, crop_sizes[i]))
            x = MaxPooling2D(pool_size=(2, 2), name=f"encoder_block_{i}_maxpooling")(conv)
    return conv, skip_connections


def decoder(x, filters, skip_connections, dtype):
    for i, filter in enumerate(filters[-2::-1]):
        conv = up_conv(filter, x, f"decoder_block_{i}")
        merge = tf.concat([conv, skip_connections.pop()], axis=-1)
        x = double_conv_layer(filter, merge, dtype, f"decoder_block_{i}")
    return x


def model_fn(args):
    inputs = Input((572, 572, 1))
    filters = [64, 128, 256, 512, 1024]
    crop_sizes = [392, 200, 104, 56]
    encoder_result, skip_connections = encoder(inputs, filters, crop_sizes, args)
    decoder_result = decoder(encoder_result, filters, skip_connections, args.dtype)
    conv = Conv2D(args.nb_classes, 1, activation=None, kernel_initializer="he_normal")(decoder_result)
    return inputs, conv
