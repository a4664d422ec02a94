"""Image helpers (reduced)."""

import cv2
import numpy as np


def read(filepath_or_buffer):
    if isinstance(filepath_or_buffer, np.ndarray):
        return filepath_or_buffer
    image = cv2.imread(filepath_or_buffer)
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
