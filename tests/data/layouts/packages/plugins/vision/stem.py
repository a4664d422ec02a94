"""The backbone's stem (imported relatively)."""
import keras


def stem(x):
    return keras.layers.Dense(16, activation="relu")(x)
