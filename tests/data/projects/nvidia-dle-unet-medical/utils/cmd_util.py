# Abridged excerpt (see SOURCE.md): NVIDIA DeepLearningExamples, TensorFlow2/Segmentation/UNet_Medical/utils/cmd_util.py.
"""Command line parsing (most options left out)."""

import argparse

from munch import Munch

PARSER = argparse.ArgumentParser(description="UNet-medical")
PARSER.add_argument("--exec_mode", choices=["train", "evaluate", "predict"], default="train")
PARSER.add_argument("--use_amp", dest="use_amp", action="store_true", help="Train using TF-AMP")
PARSER.set_defaults(use_amp=False)


def _cmd_params(flags):
    return Munch({"exec_mode": flags.exec_mode, "use_amp": flags.use_amp})
