"""A script that parses its command line at import: `python scripts/evaluate.py` (no arguments, PYTHONPATH=src) runs
with the defaults and builds the model; given arguments it does not know (the trace child's own) argparse exits 2."""
import argparse

import keras

from stepnet.model import build_model

PARSER = argparse.ArgumentParser()
PARSER.add_argument("--units", type=int, default=16)
ARGS = PARSER.parse_args()


def create_model():
    keras.utils.set_random_seed(ARGS.units)
    return build_model()
