"""Layers shared by the models; the classification head keeps float32 under any policy."""

from tensorflow.keras import layers

BATCH_NORM_EPSILON = 1e-5


def batchnorm_with_activation(inputs, activation="relu", epsilon=BATCH_NORM_EPSILON, name=None):
    nn = layers.BatchNormalization(epsilon=epsilon, name=name and name + "bn")(inputs)
    return layers.Activation(activation, name=name and name + activation)(nn) if activation else nn


def conv2d_no_bias(inputs, filters, kernel_size=1, strides=1, name=None):
    return layers.Conv2D(filters, kernel_size, strides=strides, padding="same", use_bias=False, name=name and name + "conv")(inputs)


def output_block(inputs, filters=0, activation="relu", num_classes=1000, drop_rate=0, classifier_activation="softmax"):
    nn = inputs
    if filters > 0:
        nn = conv2d_no_bias(nn, filters, 1, name="features_")
        nn = batchnorm_with_activation(nn, activation=activation, name="features_")
    if num_classes > 0:
        nn = layers.GlobalAveragePooling2D(name="avg_pool")(nn)
        if drop_rate > 0:
            nn = layers.Dropout(drop_rate, name="head_drop")(nn)
        nn = layers.Dense(num_classes, dtype="float32", activation=classifier_activation, name="predictions")(nn)
    return nn

