# Abridged excerpt (see SOURCE.md): the --amp option of trainer/utils/arguments.py (the other options left out).
import argparse


def parse_args():
    parser = argparse.ArgumentParser(description="Wide & Deep")
    parser.add_argument("--amp", action="store_true", default=False, help="Enable automatic mixed precision")
    parser.add_argument("--deep_hidden_units", type=int, default=[1024, 1024, 1024, 1024, 1024], nargs="+")
    parser.add_argument("--deep_dropout", type=float, default=0.1)
    return parser.parse_args()
