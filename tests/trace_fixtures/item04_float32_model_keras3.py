# Item 4: a model built with dtype="float32" under a global mixed policy (like keras-hub's
# `from_preset(..., dtype="float32")`) computes nothing in float16: its checkpoint is not audited as float16, so the
# values that would flush to zero in float16 are no MP303.
# fixture-codes: MP302 MP303
import os
import tempfile

import numpy as np
import tensorflow as tf
import keras

keras.mixed_precision.set_global_policy("mixed_float16")
inputs = keras.Input((4,), dtype="float32")
hidden = keras.layers.Dense(8, activation="relu", dtype="float32")(inputs)
model = keras.Model(inputs, keras.layers.Dense(2, dtype="float32")(hidden))

kernel = model.layers[1].kernel
kernel.assign(np.full(kernel.shape, 1e-9, "float32"))  # flushes to zero in float16, fine in float32
path = tf.train.Checkpoint(model=model).write(os.path.join(tempfile.mkdtemp(), "ckpt"))
tf.train.Checkpoint(model=model).read(path).expect_partial()
