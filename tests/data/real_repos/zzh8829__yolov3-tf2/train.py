"""Trains YOLOv3 (reduced: the tf.data pipeline stood in for by random images; `python train.py --size 64`)."""

import numpy as np
import tensorflow as tf
from absl import app, flags, logging
from absl.flags import FLAGS
from tensorflow.keras.callbacks import EarlyStopping, ReduceLROnPlateau  # noqa: F401

from yolov3_tf2.models import YoloLoss, YoloV3, YoloV3Tiny, yolo_anchor_masks, yolo_anchors, yolo_tiny_anchor_masks, yolo_tiny_anchors
from yolov3_tf2.utils import freeze_all  # noqa: F401

flags.DEFINE_string("dataset", "", "path to dataset")
flags.DEFINE_boolean("tiny", False, "yolov3 or yolov3-tiny")
flags.DEFINE_enum("transfer", "none", ["none", "darknet", "no_output", "frozen", "fine_tune"], "transfer mode")
flags.DEFINE_integer("size", 416, "image size")
flags.DEFINE_integer("epochs", 1, "number of epochs")
flags.DEFINE_integer("batch_size", 2, "batch size")
flags.DEFINE_float("learning_rate", 1e-3, "learning rate")
flags.DEFINE_integer("num_classes", 80, "number of classes in the model")


def setup_model():
    if FLAGS.tiny:
        model = YoloV3Tiny(FLAGS.size, training=True, classes=FLAGS.num_classes)
        anchors, anchor_masks = yolo_tiny_anchors, yolo_tiny_anchor_masks
    else:
        model = YoloV3(FLAGS.size, training=True, classes=FLAGS.num_classes)
        anchors, anchor_masks = yolo_anchors, yolo_anchor_masks
    optimizer = tf.keras.optimizers.Adam(learning_rate=FLAGS.learning_rate)
    loss = [YoloLoss(anchors[mask], classes=FLAGS.num_classes) for mask in anchor_masks]
    model.compile(optimizer=optimizer, loss=loss)
    return model, optimizer, loss, anchors, anchor_masks


def main(_argv):
    model, optimizer, loss, anchors, anchor_masks = setup_model()
    images = np.random.rand(FLAGS.batch_size, FLAGS.size, FLAGS.size, 3).astype("float32")
    targets = np.zeros((FLAGS.batch_size, FLAGS.size // 4, FLAGS.size // 4, 3, FLAGS.num_classes + 5), "float32")
    logging.info("training")
    model.fit(images, targets, epochs=FLAGS.epochs, verbose=0)


if __name__ == "__main__":
    app.run(main)
