"""Trains a model by name on ImageNet-like data: `python train_script.py -m aotnet.AotNet50 [--TPU] [--disable_float16]`."""

import argparse
import sys

import tensorflow as tf

from keras_cv_attention_models.imagenet import train_func


def parse_arguments(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("-m", "--model", type=str, default="aotnet.AotNet50")
    parser.add_argument("-i", "--input_shape", type=int, default=160)
    parser.add_argument("-e", "--epochs", type=int, default=-1)
    parser.add_argument("--num_classes", type=int, default=1000)
    parser.add_argument("--lr_base_512", type=float, default=8e-3)
    parser.add_argument("--optimizer", type=str, default="LAMB")
    parser.add_argument("--disable_float16", action="store_true", help="Disable mixed_float16 training")
    parser.add_argument("--TPU", action="store_true", help="Run training on TPU [Not working]")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_known_args(argv)[0]
    args.enable_float16 = not args.disable_float16
    return args


def run_training_by_args(args, train_dataset=None):
    strategy = train_func.init_global_strategy(args.enable_float16, args.seed, args.TPU)
    input_shape = (args.input_shape, args.input_shape, 3)
    with strategy.scope():
        model = train_func.init_model(args.model, input_shape, args.num_classes)
        loss = tf.keras.losses.CategoricalCrossentropy(label_smoothing=0.1)
        model = train_func.compile_model(model, args.optimizer, args.lr_base_512, loss)
    return train_func.train(model, args.epochs, train_dataset)


if __name__ == "__main__":
    run_training_by_args(parse_arguments(sys.argv[1:]))
