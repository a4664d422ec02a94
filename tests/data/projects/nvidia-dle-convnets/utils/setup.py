# Abridged excerpt (see SOURCE.md): NVIDIA DeepLearningExamples, TensorFlow2/Classification/ConvNets/utils/setup.py.
import os

import tensorflow as tf


def set_flags(params):
    if params.use_amp:
        policy = tf.keras.mixed_precision.experimental.Policy("mixed_float16", loss_scale="dynamic")
        tf.keras.mixed_precision.experimental.set_policy(policy)
    else:
        os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "0"
