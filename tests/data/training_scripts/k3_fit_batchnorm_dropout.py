"""Keras 3: compile + fit with BatchNormalization and Dropout (compile wraps the optimizer for mixed_float16)."""
import keras
import numpy as np

keras.mixed_precision.set_global_policy("mixed_float16")

model = keras.Sequential(
    [
        keras.Input((20,)),
        keras.layers.Dense(64),
        keras.layers.BatchNormalization(),
        keras.layers.Activation("relu"),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(10),
        keras.layers.Activation("softmax", dtype="float32"),
    ]
)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])

rng = np.random.RandomState(0)
x_batch = rng.normal(size=(64, 20)).astype("float32")
y_batch = rng.randint(0, 10, size=(64,))

if __name__ == "__main__":
    model.fit(x_batch, y_batch, batch_size=32, epochs=2)
