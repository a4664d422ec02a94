"""YOLOv3 (reduced: a two-block Darknet and one output scale)."""

import numpy as np
import tensorflow as tf
from absl import flags
from absl.flags import FLAGS
from tensorflow.keras import Model
from tensorflow.keras.layers import BatchNormalization, Conv2D, Input, Lambda, LeakyReLU
from tensorflow.keras.losses import sparse_categorical_crossentropy  # noqa: F401

flags.DEFINE_integer("yolo_max_boxes", 100, "maximum number of boxes per image")
flags.DEFINE_float("yolo_iou_threshold", 0.5, "iou threshold")
flags.DEFINE_float("yolo_score_threshold", 0.5, "score threshold")

yolo_anchors = np.array([(10, 13), (16, 30), (33, 23)], np.float32) / 416
yolo_anchor_masks = np.array([[0, 1, 2]])
yolo_tiny_anchors = yolo_anchors
yolo_tiny_anchor_masks = yolo_anchor_masks


def DarknetConv(x, filters, size, strides=1):
    x = Conv2D(filters=filters, kernel_size=size, strides=strides, padding="same", use_bias=False)(x)
    x = BatchNormalization()(x)
    return LeakyReLU(alpha=0.1)(x)


def Darknet(name=None):
    x = inputs = Input([None, None, 3])
    x = DarknetConv(x, 16, 3)
    x = DarknetConv(x, 32, 3, 2)
    x = DarknetConv(x, 64, 3, 2)
    return tf.keras.Model(inputs, x, name=name)


def YoloOutput(filters, anchors, classes, name=None):
    def yolo_output(x_in):
        x = inputs = Input(x_in.shape[1:])
        x = DarknetConv(x, filters * 2, 3)
        x = Conv2D(anchors * (classes + 5), 1, use_bias=True)(x)
        x = Lambda(lambda x: tf.reshape(x, (-1, tf.shape(x)[1], tf.shape(x)[2], anchors, classes + 5)))(x)
        return tf.keras.Model(inputs, x, name=name)(x_in)

    return yolo_output


def YoloV3(size=None, channels=3, anchors=yolo_anchors, masks=yolo_anchor_masks, classes=80, training=False):
    x = inputs = Input([size, size, channels], name="input")
    x = Darknet(name="yolo_darknet")(x)
    output_0 = YoloOutput(32, len(masks[0]), classes, name="yolo_output_0")(x)
    return Model(inputs, output_0, name="yolov3")


YoloV3Tiny = YoloV3


def YoloLoss(anchors, classes=80, ignore_thresh=0.5):
    def yolo_loss(y_true, y_pred):
        return tf.reduce_sum(tf.square(tf.cast(y_pred, tf.float32)), axis=[1, 2, 3, 4])

    return yolo_loss
