"""Trains EfficientDet (reduced: generators and callbacks left out; `python train.py --phi 0 pascal <path>`)."""

import argparse
import sys

import numpy as np
import tensorflow as tf  # noqa: F401
from tensorflow.keras.optimizers import Adam

from model import efficientdet


def parse_args(args):
    parser = argparse.ArgumentParser(description="Simple training script for using snapshots to train EfficientDet.")
    parser.add_argument("--phi", help="Hyper parameter phi", default=0, type=int, choices=(0,))
    parser.add_argument("--num-classes", default=20, type=int)
    parser.add_argument("--epochs", default=1, type=int)
    return parser.parse_args(args)


def main(args=None):
    if args is None:
        args = sys.argv[1:]
    args = parse_args(args)
    model, prediction_model = efficientdet(args.phi, num_classes=args.num_classes)
    model.compile(optimizer=Adam(learning_rate=1e-3), loss={"regression": "mse", "classification": "binary_crossentropy"})
    images = np.random.rand(2, 64, 64, 3).astype("float32")
    cls, reg = model.predict(images, verbose=0)
    return model.fit(images, {"classification": np.zeros_like(cls), "regression": np.zeros_like(reg)}, epochs=args.epochs, verbose=0)


if __name__ == "__main__":
    main()
