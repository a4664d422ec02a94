# Abridged excerpt (see SOURCE.md): tensorflow/models official/legacy/image_classification/resnet/common.py.
from official.utils.flags import core as flags_core


def define_keras_flags():
    flags_core.define_performance(dtype=True)
