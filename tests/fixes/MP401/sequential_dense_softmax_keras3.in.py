"""MNIST MLP written the way the Keras examples do, with mixed precision switched on."""
import keras
import numpy as np
from keras import layers

keras.mixed_precision.set_global_policy("mixed_float16")

model = keras.Sequential(
    [
        keras.Input(shape=(784,)),
        layers.Dense(256, activation="relu"),
        layers.Dropout(0.2),
        layers.Dense(10, activation="softmax"),
    ]
)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])

x = np.random.rand(64, 784).astype("float32")
y = np.random.randint(0, 10, size=(64,))
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
