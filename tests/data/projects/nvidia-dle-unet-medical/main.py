# Abridged excerpt (see SOURCE.md): NVIDIA DeepLearningExamples, TensorFlow2/Segmentation/UNet_Medical/main.py.
"""Entry point: parse the command line, set the policy when --use_amp is given, build the UNet."""

import tensorflow as tf

from model.unet import Unet
from utils.cmd_util import PARSER, _cmd_params


def main():
    flags = PARSER.parse_args()
    params = _cmd_params(flags)

    if params.use_amp:
        tf.keras.mixed_precision.experimental.set_policy("mixed_float16")

    model = Unet()
    return model


if __name__ == "__main__":
    main()
