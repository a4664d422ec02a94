# Abridged excerpt (see SOURCE.md): the --use_amp option of utils/cmdline_helper.py (the other options left out).
import argparse


def parse_cmdline():
    parser = argparse.ArgumentParser(description="ConvNets")
    parser.add_argument("--use_amp", action="store_true", default=False, help="Use automatic mixed precision")
    return parser.parse_args()
