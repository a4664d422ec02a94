"""Ports the PyTorch ConvNeXt weights to the Keras model (reduced: the per-layer weight copy left out)."""

import argparse

import numpy as np
import tensorflow as tf  # noqa: F401
import torch

from models import convnext
from models.convnext_tf import get_convnext_model
from models.model_configs import get_model_config


def parse_args():
    parser = argparse.ArgumentParser(description="Conversion of the PyTorch pre-trained ConvNeXt weights to TensorFlow.")
    parser.add_argument("-m", "--model_name", default="convnext_tiny", type=str, choices=["convnext_tiny", "convnext_small"])
    parser.add_argument("-d", "--dataset", default="imagenet-1k", type=str, choices=["imagenet-1k", "imagenet-21k"])
    parser.add_argument("-r", "--resolution", default=224, type=int)
    return parser.parse_args()


def main(args):
    print(f"Model: {args.model_name}")
    cfg = get_model_config(args.model_name)
    keras_model = get_convnext_model(model_name=args.model_name, depths=cfg.depths, dims=cfg.dims, input_shape=(args.resolution, args.resolution, 3))
    pt_model = convnext.convnext_tiny()
    pt_model.eval()
    keras_model(np.zeros((1, args.resolution, args.resolution, 3), "float32"))
    print(torch.__version__)
    keras_model.save_weights(f"{args.model_name}.weights.h5")


if __name__ == "__main__":
    args = parse_args()
    main(args)
