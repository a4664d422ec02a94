"""An optional tracker imported under try/except ImportError: the code has a fallback for its absence, so no
stand-in is given (the fallback runs, as in an environment without it) and the run is not marked."""

import keras

try:
    import mpdoctor_fixture_tracker as tracker
except ImportError:
    tracker = None

if tracker is not None:
    raise RuntimeError("only reached with a stand-in for the guarded import")

keras.mixed_precision.set_global_policy("mixed_float16")


def build_model():
    inputs = keras.Input((8,))
    outputs = keras.layers.Dense(2, activation="softmax")(inputs)  # float16 softmax
    return keras.Model(inputs, outputs)
