"""The input width comes from a data frame read with a module not installed: with a stand-in, the shape is a
stand-in and Keras refuses it (ValueError naming the stand-in at line 9), which is the stand-in's doing, not a bug."""

import keras
import mpdoctor_fixture_frames as frames

keras.mixed_precision.set_global_policy("mixed_float16")
table = frames.read_csv("features.csv")
inputs = keras.Input((table.shape[1],))
outputs = keras.layers.Dense(2)(inputs)
model = keras.Model(inputs, outputs)
