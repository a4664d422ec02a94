"""Golden input: a float32 checkpoint with values beyond float16's range restored into a model that computes in
float16 (MP302 audit), with names that match nothing (MP304), an export of a float16 model (MP203), and the same
checkpoint restored into float16 variables (MP301)."""
import numpy as np
import tensorflow as tf
from tensorflow import keras

kernel = tf.Variable(np.full((4, 2), 1e5, dtype=np.float32))
bias = tf.Variable(np.zeros(2, dtype=np.float32))
tf.train.Checkpoint(kernel=kernel, bias=bias).write("pretrained/ckpt")

keras.mixed_precision.set_global_policy("mixed_float16")
inputs = keras.Input((4,))
net = keras.Model(inputs, keras.layers.Dense(2, name="dense")(inputs))
tf.train.Checkpoint(head=net).read("pretrained/ckpt")
tf.saved_model.save(net, "exported")

keras.mixed_precision.set_global_policy("float16")
restored_kernel = tf.Variable(np.zeros((4, 2), dtype=np.float16))
tf.train.Checkpoint(kernel=restored_kernel).read("pretrained/ckpt")
