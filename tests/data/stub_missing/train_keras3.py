"""A training script whose module level logs, plots, loads a config and reads a data frame through modules not
installed here (mpdoctor_fixture_tracker and mpdoctor_fixture_frames surely nowhere; tqdm and yaml hidden).
Without stand-ins the run stops at line 9 (ModuleNotFoundError: No module named 'mpdoctor_fixture_tracker'); with
them it builds the model, whose float16 softmax output is MP401."""

import keras

import hide_installed  # noqa: F401
import mpdoctor_fixture_tracker as tracker
import mpdoctor_fixture_frames as frames
import yaml
from mpdoctor_fixture_tracker.integration.keras import MetricsLogger
from tqdm import tqdm

tracker.init(project="mixed", config={"lr": 1e-3})
with open(__file__) as handle:
    config = yaml.safe_load(handle) or {"units": 16}
table = frames.read_csv("train.csv").dropna()
for row in tqdm(table.itertuples(), desc="rows"):
    raise AssertionError("a stand-in's iteration ends at once")

keras.mixed_precision.set_global_policy("mixed_float16")


class Logger(MetricsLogger):
    def on_epoch_end(self, epoch, logs=None):
        self.log({"epoch": epoch})


@tracker.watch
def build_model():
    inputs = keras.Input((8,))
    x = keras.layers.Dense(config["units"], activation="relu")(inputs)
    outputs = keras.layers.Dense(2, activation="softmax")(x)  # float16 softmax
    return keras.Model(inputs, outputs)


model = build_model()
callbacks = [Logger()]
