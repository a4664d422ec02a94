#!/usr/bin/env python
"""Trains a RetinaNet (reduced: generators stood in for by random boxes; `python keras_retinanet/bin/train.py`)."""

import argparse
import os
import sys

import numpy as np
import progressbar  # noqa: F401  (progressbar2, used by the evaluation callback upstream)
from tensorflow import keras

# Allow relative imports when being executed as script.
if __name__ == "__main__" and __package__ is None:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    import keras_retinanet.bin  # noqa: F401

    __package__ = "keras_retinanet.bin"

from .. import models


def create_models(backbone_retinanet, num_classes, lr=1e-5):
    model = backbone_retinanet(num_classes)
    training_model = model
    training_model.compile(
        loss={"regression": "mse", "classification": "binary_crossentropy"},
        optimizer=keras.optimizers.Adam(learning_rate=lr, clipnorm=0.001),
    )
    return model, training_model


def parse_args(args):
    parser = argparse.ArgumentParser(description="Simple training script for training a RetinaNet network.")
    parser.add_argument("--backbone", default="mobilenet128_1.0")
    parser.add_argument("--num-classes", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=1)
    return parser.parse_args(args)


def main(args=None):
    if args is None:
        args = sys.argv[1:]
    args = parse_args(args)
    backbone = models.backbone(args.backbone)
    model, training_model = create_models(backbone.retinanet, args.num_classes)
    images = np.random.rand(2, 64, 64, 3).astype("float32")
    outputs = training_model.predict(images, verbose=0)
    targets = {"regression": np.zeros_like(outputs[0]), "classification": np.zeros_like(outputs[1])}
    return training_model.fit(images, targets, epochs=args.epochs, verbose=0)


if __name__ == "__main__":
    main()
