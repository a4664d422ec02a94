"""The model's output head (imported relatively by stepnet.model)."""
import keras


def classifier_head(x, classes):
    return keras.layers.Dense(classes, activation="softmax", dtype="float32", name="head")(x)
