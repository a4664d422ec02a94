# Keras 3: keras.ops.cast in a Lambda right before a Dense computing in float16.
import keras
from keras import layers, ops

keras.mixed_precision.set_global_policy("mixed_float16")

model = keras.Sequential(
    [
        keras.Input(shape=(20,)),
        layers.Dense(64, activation="relu"),
        layers.Lambda(lambda x: ops.cast(x, "float32")),
        layers.Dense(1, dtype="float32"),
    ]
)
model.compile(optimizer="adam", loss="mse")
