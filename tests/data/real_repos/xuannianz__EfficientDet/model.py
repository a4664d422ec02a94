"""EfficientDet (reduced: phi 0 only, a plain top-down FPN for the BiFPN, no box decoding layers)."""

from functools import reduce  # noqa: F401

import numpy as np
import tensorflow as tf  # noqa: F401
from tensorflow.keras import layers, models

from tfkeras import EfficientNetB0
from utils.anchors import anchors_for_shape

w_bifpns = [32]
d_heads = [2]
image_sizes = [64]
backbones = [EfficientNetB0]


def SeparableConvBlock(num_channels, kernel_size, strides, name, freeze_bn=False):
    f1 = layers.SeparableConv2D(num_channels, kernel_size=kernel_size, strides=strides, padding="same", use_bias=True, name=f"{name}/conv")
    f2 = layers.BatchNormalization(name=f"{name}/bn")
    return lambda x: f2(f1(x))


def efficientdet(phi, num_classes=20, num_anchors=9, weighted_bifpn=False, freeze_bn=False, score_threshold=0.01, anchor_parameters=None, separable_conv=True):
    assert phi in range(len(image_sizes))
    input_size = image_sizes[phi]
    image_input = layers.Input((input_size, input_size, 3))
    features = backbones[phi](input_tensor=image_input, freeze_bn=freeze_bn)
    p3, p4 = [layers.Conv2D(w_bifpns[phi], 1, name="fpn_lateral_%d" % i)(f) for i, f in enumerate(features)]
    p3 = layers.Add(name="fpn_p3_add")([p3, layers.UpSampling2D(name="fpn_p4_up")(p4)])
    classification, regression = [], []
    for i, feature in enumerate((p3, p4)):
        c = SeparableConvBlock(w_bifpns[phi], 3, 1, name="class_net_%d" % i)(feature)
        c = layers.Conv2D(num_classes * num_anchors, 3, padding="same", activation="sigmoid", name="class_net_head_%d" % i)(c)
        classification.append(layers.Reshape((-1, num_classes))(c))
        r = layers.Conv2D(4 * num_anchors, 3, padding="same", name="box_net_head_%d" % i)(feature)
        regression.append(layers.Reshape((-1, 4))(r))
    classification = layers.Concatenate(axis=1, name="classification")(classification)
    regression = layers.Concatenate(axis=1, name="regression")(regression)
    model = models.Model(inputs=[image_input], outputs=[classification, regression], name="efficientdet")
    anchors = anchors_for_shape((input_size, input_size), anchor_params=anchor_parameters)
    np.expand_dims(anchors, axis=0)
    prediction_model = model
    return model, prediction_model


if __name__ == "__main__":
    x, y = efficientdet(0)
