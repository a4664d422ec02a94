# Abridged excerpt (see SOURCE.md): NVIDIA DeepLearningExamples, TensorFlow2/Recommendation/WideAndDeep/trainer/utils/setup.py.
import logging

import tensorflow as tf


def init_gpu(args, logger):
    if args.amp:
        tf.keras.mixed_precision.set_global_policy("mixed_float16")


def create_config(args):
    logger = logging.getLogger("tensorflow")
    init_gpu(args, logger)
    return {}
