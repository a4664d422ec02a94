"""Trains an ImageNet backbone with Horovod; mixed precision (graph rewrite, fixed loss scale) unless --fp32."""

import argparse

import horovod.tensorflow as hvd
import tensorflow as tf

from models import resnet
from trainer import train_step


def add_cli_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet50v1_b")
    parser.add_argument("--num_classes", type=int, default=1000)
    parser.add_argument("--learning_rate", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--fp32", action="store_true", help="disable mixed precision training")
    parser.add_argument("--xla_off", action="store_true")
    return parser


def main():
    hvd.init()
    FLAGS, _ = add_cli_args().parse_known_args()
    if not FLAGS.xla_off:
        tf.config.optimizer.set_jit(True)
    if not FLAGS.fp32:
        tf.config.optimizer.set_experimental_options({"auto_mixed_precision": True})

    model = resnet.ResNet50V1_b(weights=None, classes=FLAGS.num_classes)
    opt = tf.keras.optimizers.SGD(learning_rate=FLAGS.learning_rate, momentum=FLAGS.momentum, nesterov=True)
    if not FLAGS.fp32:
        opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(opt, loss_scale=128.0)
    loss_func = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)

    images = tf.zeros((8, 224, 224, 3))
    labels = tf.one_hot(tf.zeros((8,), tf.int32), FLAGS.num_classes)
    for step in range(2):
        train_step(model, opt, loss_func, images, labels, step == 0, fp32=FLAGS.fp32)


if __name__ == "__main__":
    main()
