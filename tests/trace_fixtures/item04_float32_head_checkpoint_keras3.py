# Item 4: checkpoint values are judged by the layer that uses them. Under mixed_float16 the float32 head
# `Dense(1, dtype="float32")` (what MP401's fix creates) holding a bias of 1e5 computes in float32 and returns a
# finite 1e5: no MP302. The same 1e5 in the float16 hidden layer of `overflowing` does become inf: MP302 there.
# fixture-codes: MP302 MP303
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf
import keras

keras.mixed_precision.set_global_policy("mixed_float16")


def regressor(name):
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="relu", name=f"{name}_hidden")(inputs)
    return keras.Model(inputs, keras.layers.Dense(1, dtype="float32", name=f"{name}_head")(hidden), name=name)


def round_trip(model, variable):
    """Write a checkpoint in which `variable` holds 1e5, then restore it: what a fine-tuning script does."""
    variable.assign(np.full(variable.shape, 1e5, "float32"))
    path = tf.train.Checkpoint(model=model).write(os.path.join(tempfile.mkdtemp(), "ckpt"))
    variable.assign(np.zeros(variable.shape, "float32"))
    return path


finite = regressor("finite")
checkpoint = round_trip(finite, finite.get_layer("finite_head").bias)
tf.train.Checkpoint(model=finite).read(checkpoint).expect_partial()

overflowing = regressor("overflowing")
checkpoint = round_trip(overflowing, overflowing.get_layer("overflowing_hidden").bias)
tf.train.Checkpoint(model=overflowing).read(checkpoint).expect_partial()  # expect: MP302

if __name__ == "__main__":  # ground truth: the float32 head returns 1e5; the float16 hidden layer gives inf
    batch = np.ones((2, 4), "float32")
    for name in sys.argv[1:]:
        print(name, bool(np.isfinite(np.asarray(globals()[name](batch), "float32")).all()))
