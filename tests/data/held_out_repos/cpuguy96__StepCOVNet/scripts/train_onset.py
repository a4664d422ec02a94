"""Trains the onset model: `python scripts/train_onset.py --train_data_dir ... --model_output_dir ...`."""

import argparse

import tensorflow as tf

from stepcovnet import config
from stepcovnet import trainers

PARSER = argparse.ArgumentParser(description="Train the onset model")
PARSER.add_argument("--train_data_dir", type=str, required=True)
PARSER.add_argument("--val_data_dir", type=str, required=True)
PARSER.add_argument("--model_output_dir", type=str, required=True)
PARSER.add_argument("--epochs", type=int, default=None)
ARGS = PARSER.parse_args()

if tf.config.list_physical_devices("GPU"):
    import keras

    print("Training with GPU.")

    keras.mixed_precision.set_global_policy(
        keras.mixed_precision.Policy("mixed_float16")
    )

    # XLA can speed the compiled graphs up
    tf.config.optimizer.set_jit("autoclustering")


def main():
    dataset_config = config.OnsetDatasetConfig(data_dir=ARGS.train_data_dir, val_data_dir=ARGS.val_data_dir)
    model_config = config.OnsetModelConfig()
    run_config = config.RunConfig(model_output_dir=ARGS.model_output_dir)
    if ARGS.epochs is not None:
        run_config.epoch = ARGS.epochs
    trainers.run_train_from_config(dataset_config, model_config, run_config)


if __name__ == "__main__":
    main()
