# Abridged excerpt (see SOURCE.md): tensorflow/models official/legacy/image_classification/resnet/resnet_ctl_imagenet_main.py.
"""Runs a ResNet model on the ImageNet dataset using custom training loops."""

from absl import app, flags

from official.legacy.image_classification.resnet import common, resnet_runnable
from official.modeling import performance
from official.utils.flags import core as flags_core


def run(flags_obj):
    performance.set_mixed_precision_policy(flags_core.get_tf_dtype(flags_obj))
    runnable = resnet_runnable.ResnetRunnable(flags_obj, None, 1000)
    return runnable


def main(_):
    run(flags.FLAGS)


if __name__ == "__main__":
    common.define_keras_flags()
    app.run(main)
