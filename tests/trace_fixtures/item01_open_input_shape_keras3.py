# Item 1: an image model whose input leaves height and width open (like keras.applications with input_shape=None).
# Five valid 3x3 convolutions of stride 2 need at least 63x63 pixels: fed 2x2 images they produce empty tensors
# (or refuse the input), and pooling over nothing is NaN in float16 and float32 alike. The sample must be 63x63
# (the smallest size without an empty layer output), and nothing may be reported.
# fixture-codes: MP404 MP405 MP402
import sys

import numpy as np
import keras


def convolutions(inputs):
    x = inputs
    for filters in (8, 16, 16, 32, 32):
        x = keras.layers.Conv2D(filters, 3, strides=2, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(10)(x)
    return keras.layers.Activation("softmax", dtype="float32")(x)


if __name__ == "__main__":  # ground truth: `python FILE SIZE...`: is a float32 run on SIZE x SIZE images finite?
    inputs = keras.Input((None, None, 3))
    reference = keras.Model(inputs, convolutions(inputs))
    for size in map(int, sys.argv[1:]):
        try:
            print(size, bool(np.isfinite(reference(np.random.rand(2, size, size, 3).astype("float32"))).all()))
        except Exception as exc:
            print(size, "raises", type(exc).__name__)

keras.mixed_precision.set_global_policy("mixed_float16")
inputs = keras.Input((None, None, 3))
model = keras.Model(inputs, convolutions(inputs))
