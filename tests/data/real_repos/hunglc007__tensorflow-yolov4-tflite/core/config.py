#! /usr/bin/env python
# coding=utf-8
from easydict import EasyDict as edict

__C = edict()
# Consumers can get config by: from config import cfg
cfg = __C

__C.YOLO = edict()
__C.YOLO.CLASSES = "./data/classes/coco.names"
__C.YOLO.STRIDES = [8, 16]
__C.YOLO.ANCHOR_PER_SCALE = 3
__C.YOLO.IOU_LOSS_THRESH = 0.5

__C.TRAIN = edict()
__C.TRAIN.BATCH_SIZE = 2
__C.TRAIN.INPUT_SIZE = 64
__C.TRAIN.LR_INIT = 1e-3
__C.TRAIN.EPOCHS = 1
