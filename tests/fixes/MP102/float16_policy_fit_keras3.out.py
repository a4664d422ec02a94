import keras
import numpy as np
from keras import layers

keras.mixed_precision.set_global_policy("mixed_float16")

model = keras.Sequential([
    keras.Input((20,)),
    layers.Dense(64, activation="relu"),
    layers.Dense(64, activation="relu"),
    layers.Dense(1, activation="sigmoid", dtype="float32"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy", metrics=["accuracy"])
x = np.random.rand(256, 20).astype("float32")
y = (x.mean(axis=1) > 0.5).astype("float32")
model.fit(x, y, epochs=3, batch_size=32)
