# coding=utf-8
"""The main training pipeline, TF1 estimator (reduced: TPU and data options left out)."""

from __future__ import absolute_import, division, print_function

import numpy as np
import tensorflow.compat.v1 as tf
from absl import app, flags
from tensorflow.compat.v1 import estimator as tf_estimator

import model as model_lib
import resnet

FLAGS = flags.FLAGS
flags.DEFINE_integer("train_batch_size", 4, "Batch size for training.")
flags.DEFINE_integer("resnet_depth", 50, "Depth of ResNet.")
flags.DEFINE_integer("width_multiplier", 1, "Multiplier to change width of network.")
flags.DEFINE_string("model_dir", None, "Model directory for training.")


def main(argv):
    num_classes = 10
    model = resnet.resnet_v1(resnet_depth=FLAGS.resnet_depth, width_multiplier=FLAGS.width_multiplier)
    estimator = tf_estimator.Estimator(model_lib.build_model_fn(model, num_classes, 64), model_dir=FLAGS.model_dir)

    def input_fn():
        images = np.random.rand(8, 32, 32, 3).astype("float32")
        labels = np.eye(num_classes, dtype="float32")[np.random.randint(0, num_classes, 8)]
        return tf.data.Dataset.from_tensor_slices((images, labels)).batch(FLAGS.train_batch_size)

    estimator.train(input_fn, max_steps=1)


if __name__ == "__main__":
    tf.disable_v2_behavior()
    app.run(main)
