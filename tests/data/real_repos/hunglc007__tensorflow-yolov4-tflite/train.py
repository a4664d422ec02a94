"""Trains YOLOv4 (reduced: the dataset, loss loop and weight loading left out; `python train.py`)."""

import numpy as np
import tensorflow as tf
from absl import app, flags, logging
from absl.flags import FLAGS

from core import utils
from core.config import cfg
from core.yolov4 import YOLO, compute_loss, decode_train  # noqa: F401

flags.DEFINE_string("model", "yolov4", "yolov4, yolov3")
flags.DEFINE_string("weights", "./scripts/yolov4.weights", "pretrained weights")
flags.DEFINE_boolean("tiny", False, "yolo or yolo-tiny")


def main(_argv):
    STRIDES, ANCHORS, NUM_CLASS, XYSCALE = utils.load_config(FLAGS)
    input_layer = tf.keras.layers.Input([cfg.TRAIN.INPUT_SIZE, cfg.TRAIN.INPUT_SIZE, 3])
    feature_maps = YOLO(input_layer, NUM_CLASS, FLAGS.model, FLAGS.tiny)
    bbox_tensors = []
    for i, fm in enumerate(feature_maps):
        bbox_tensor = decode_train(fm, cfg.TRAIN.INPUT_SIZE // STRIDES[i], NUM_CLASS, STRIDES, ANCHORS, i, XYSCALE)
        bbox_tensors.append(fm)
        bbox_tensors.append(bbox_tensor)
    model = tf.keras.Model(input_layer, bbox_tensors)
    model.summary()
    optimizer = tf.keras.optimizers.Adam()
    image_data = np.random.rand(cfg.TRAIN.BATCH_SIZE, cfg.TRAIN.INPUT_SIZE, cfg.TRAIN.INPUT_SIZE, 3).astype("float32")
    with tf.GradientTape() as tape:
        pred_result = model(image_data, training=True)
        total_loss = tf.add_n([tf.reduce_mean(tf.square(p)) for p in pred_result[1::2]])
        gradients = tape.gradient(total_loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    logging.info("total_loss: %4.2f", total_loss)


if __name__ == "__main__":
    app.run(main)
