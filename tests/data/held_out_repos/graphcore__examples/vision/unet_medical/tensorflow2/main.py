"""Entry point: `python main.py --dtype float16`."""

import tensorflow as tf

from parse_args import parse_params
from unet import unet

if tf.__version__[0] != "2":
    raise ImportError("TensorFlow 2 is required for this example")


def main():
    args = parse_params()
    tf.keras.backend.set_floatx(args.dtype)
    ds_train = tf.data.Dataset.from_tensors((tf.zeros((1, 572, 572, 1)), tf.zeros((1, 388, 388, 2)))).repeat()
    return unet(args, ds_train)


if __name__ == "__main__":
    main()
