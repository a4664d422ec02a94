"""The same on tf_keras (Keras 2): without stand-ins the run stops at line 8; with them the model is built and its
float16 softmax output is MP401."""

import tensorflow as tf
import tf_keras as keras

import hide_installed  # noqa: F401
import mpdoctor_fixture_frames as frames
import mpdoctor_fixture_tracker as tracker
from tqdm.auto import tqdm

keras.mixed_precision.set_global_policy("mixed_float16")
tracker.init(project="mixed")
table = frames.DataFrame({"x": [1, 2]})
steps = [step for step in tqdm(range(3))]


def build_model():
    model = keras.Sequential(
        [
            keras.layers.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(2, activation="softmax"),  # float16 softmax
        ]
    )
    return model


model = build_model()
tf.print(len(steps))
