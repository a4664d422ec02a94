"""Command line options (reduced to those the mixed precision path reads)."""

import argparse


def parse_params():
    parser = argparse.ArgumentParser(description="UNet on the IPU")
    parser.add_argument("--optimizer", type=str, default="adam", choices=["adam", "sgd"])
    parser.add_argument("--learning-rate", type=float, default=0.0001)
    parser.add_argument("--loss-scale", type=int, default=128, help="Loss scaling factor.")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--gradient-accumulation-count", type=int, default=1)
    parser.add_argument("--num-epochs", type=int, default=100)
    parser.add_argument("--nb-classes", type=int, default=2)
    parser.add_argument("--drop-rate", type=float, default=0.5)
    parser.add_argument("--dtype", default="float16", type=str, help="Data type, default float16, else float32")
    return parser.parse_args()
