#! /usr/bin/env python
# coding=utf-8
import numpy as np  # noqa: F401
import tensorflow as tf

import core.backbone as backbone
import core.common as common
import core.utils as utils  # noqa: F401
from core.config import cfg  # noqa: F401


def YOLO(input_layer, NUM_CLASS, model="yolov4", is_tiny=False):
    return YOLOv4(input_layer, NUM_CLASS)


def YOLOv4(input_layer, NUM_CLASS):
    route_1, route_2 = backbone.cspdarknet53(input_layer)
    conv = common.convolutional(route_2, (1, 1, 64, 32))
    up = common.upsample(conv)
    route_1 = tf.concat([common.convolutional(route_1, (1, 1, 32, 32)), up], axis=-1)
    conv_sbbox = common.convolutional(route_1, (1, 1, 64, 3 * (NUM_CLASS + 5)), activate=False, bn=False)
    conv_mbbox = common.convolutional(route_2, (1, 1, 64, 3 * (NUM_CLASS + 5)), activate=False, bn=False)
    return [conv_sbbox, conv_mbbox]


def decode_train(conv_output, output_size, NUM_CLASS, STRIDES, ANCHORS, i=0, XYSCALE=[1, 1, 1]):
    conv_output = tf.reshape(conv_output, (tf.shape(conv_output)[0], output_size, output_size, 3, 5 + NUM_CLASS))
    conv_raw_dxdy, conv_raw_dwdh, conv_raw_conf, conv_raw_prob = tf.split(conv_output, (2, 2, 1, NUM_CLASS), axis=-1)
    return tf.concat([tf.sigmoid(conv_raw_dxdy), tf.exp(conv_raw_dwdh), tf.sigmoid(conv_raw_conf), tf.sigmoid(conv_raw_prob)], axis=-1)


def compute_loss(pred, conv, label, bboxes, STRIDES, NUM_CLASS, IOU_LOSS_THRESH, i=0):
    return tf.reduce_mean(tf.square(pred - label))
