# Abridged excerpt (see SOURCE.md): google/automl efficientdet/tf2/train.py.
"""The main training script."""

import types

import tensorflow as tf
from absl import app, flags

import utils
from tf2 import train_lib

FLAGS = flags.FLAGS


def define_flags():
    flags.DEFINE_enum("strategy", "", ["tpu", "gpus", ""], "Training: gpus for multi-gpu, if None, use TF default.")
    flags.DEFINE_string("model_name", "efficientdet-d0", "Model name.")


def main(_):
    config = types.SimpleNamespace(strategy=FLAGS.strategy, mixed_precision=True, num_classes=90)
    precision = utils.get_precision(config.strategy, config.mixed_precision)
    policy = tf.keras.mixed_precision.Policy(precision)
    tf.keras.mixed_precision.set_global_policy(policy)
    model = train_lib.EfficientDetNetTrain(config=config)
    return model


if __name__ == "__main__":
    define_flags()
    app.run(main)
