"""Blocks shared by the models (imported as ..layers.blocks)."""
import keras


def dense_block(x, units):
    return keras.layers.Dense(units, activation="relu")(x)
