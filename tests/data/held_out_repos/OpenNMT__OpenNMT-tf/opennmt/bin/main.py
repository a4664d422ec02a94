"""Entry point: `onmt-main train --mixed_precision`."""

import argparse

from opennmt import models
from opennmt.runner import Runner


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("run_type", choices=["train"])
    parser.add_argument("--mixed_precision", default=False, action="store_true", help="Enable mixed precision.")
    parser.add_argument("--vocab_size", type=int, default=32000)
    args = parser.parse_args()

    runner = Runner(lambda: models.SequenceToSequence(args.vocab_size), config={}, mixed_precision=args.mixed_precision)
    if args.run_type == "train":
        runner.train(dataset=[])


if __name__ == "__main__":
    main()
