# Item 5: the common workaround for a float32 checkpoint that will not restore into float16 variables: read the
# values yourself and assign them cast (`var.assign(tf.cast(value, var.dtype))`). The values are range-audited
# (one kernel holds 1e5: inf in float16, MP302) and matched (the head's bias is never assigned, MP304), at the line
# that opened the file, for TF checkpoints read with tf.train.load_checkpoint and for .npz files read with np.load.
# fixture-codes: MP302 MP303 MP304 MP001
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf
import keras


def regressor():
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(1)(hidden))


# a float32 training run wrote the weights; one hidden kernel grew to 1e5
keras.mixed_precision.set_global_policy("float32")
trained = regressor()
trained.layers[1].kernel.assign(np.full((4, 8), 1e5, "float32"))
directory = tempfile.mkdtemp()
prefix = tf.train.Checkpoint(**{f"w{i}": v for i, v in enumerate(trained.weights)}).write(os.path.join(directory, "ckpt"))
np.savez(os.path.join(directory, "weights.npz"), **{f"w{i}": v.numpy() for i, v in enumerate(trained.weights)})

keras.mixed_precision.set_global_policy("float16")  # float16 variables: tf.train.Checkpoint.read would fail
from_checkpoint = regressor()
reader = tf.train.load_checkpoint(prefix)  # expect: MP302, MP304
for i, variable in enumerate(from_checkpoint.weights[:3]):  # the head's bias forgotten
    variable.assign(tf.cast(reader.get_tensor(f"w{i}/.ATTRIBUTES/VARIABLE_VALUE"), variable.dtype))

from_npz = regressor()
arrays = np.load(os.path.join(directory, "weights.npz"))  # expect: MP302
from_npz.set_weights([arrays[f"w{i}"] for i in range(4)])

if __name__ == "__main__":  # ground truth: the float16 model computes inf from the restored 1e5
    print("finite", bool(np.isfinite(np.asarray(from_npz(np.ones((2, 4), "float32")), "float32")).all()))
