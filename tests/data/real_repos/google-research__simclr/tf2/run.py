# coding=utf-8
"""The main training pipeline (reduced: the tfds builder stood in for by random CIFAR-sized images)."""

import numpy as np
import tensorflow.compat.v2 as tf
import tensorflow_datasets as tfds  # noqa: F401
from absl import app, flags, logging

import model as model_lib

FLAGS = flags.FLAGS
flags.DEFINE_integer("train_batch_size", 4, "Batch size for training.")
flags.DEFINE_integer("resnet_depth", 50, "Depth of ResNet.")
flags.DEFINE_integer("width_multiplier", 1, "Multiplier to change width of network.")
flags.DEFINE_float("learning_rate", 0.3, "Initial learning rate per batch size of 256.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError("Too many command-line arguments.")
    num_classes = 10
    strategy = tf.distribute.MirroredStrategy()
    logging.info("Running using MirroredStrategy on %d replicas", strategy.num_replicas_in_sync)
    with strategy.scope():
        model = model_lib.Model(num_classes)
        optimizer = model_lib.build_optimizer(FLAGS.learning_rate)
    images = np.random.rand(FLAGS.train_batch_size, 32, 32, 3).astype("float32")
    with tf.GradientTape() as tape:
        projection, logits = model(images, training=True)
        loss = tf.reduce_mean(tf.square(projection)) + tf.reduce_mean(tf.square(logits))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))


if __name__ == "__main__":
    tf.compat.v1.enable_v2_behavior()
    app.run(main)
