# The trace on every backend (tests/test_backend_trace.py): a regression head left in float16 (MP402, trace only)
# and a classifier whose softmax computes in float16 (MP401), beside a head kept in float32 (no finding).
# fixture-codes: MP401 MP402
import keras

keras.mixed_precision.set_global_policy("mixed_float16")


def build_model():
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    value = keras.layers.Dense(1, name="value")(hidden)  # expect: MP402
    label = keras.layers.Dense(3, activation="softmax", name="label")(hidden)  # expect: MP401
    kept = keras.layers.Dense(2, dtype="float32", name="kept")(hidden)
    return keras.Model(inputs, [value, label, kept])
