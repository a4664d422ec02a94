import numpy as np
from tensorflow import keras  # noqa: F401

from utils.compute_overlap import compute_overlap  # noqa: F401


def anchors_for_shape(image_shape, pyramid_levels=(3, 4), anchor_params=None):
    return np.concatenate([np.zeros(((image_shape[0] // 2**level) ** 2 * 9, 4)) for level in pyramid_levels])
