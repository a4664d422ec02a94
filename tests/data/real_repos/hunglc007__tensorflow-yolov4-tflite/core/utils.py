import cv2  # noqa: F401
import numpy as np

from core.config import cfg


def load_config(FLAGS):
    STRIDES = np.array(cfg.YOLO.STRIDES)
    ANCHORS = np.ones((len(STRIDES), 3, 2), np.float32)
    NUM_CLASS = 80
    XYSCALE = [1.2, 1.1]
    return STRIDES, ANCHORS, NUM_CLASS, XYSCALE


def freeze_all(model, frozen=True):
    model.trainable = not frozen


def unfreeze_all(model, frozen=False):
    model.trainable = not frozen
