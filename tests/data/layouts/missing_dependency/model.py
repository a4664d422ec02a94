"""A model module that logs to wandb, declared by the project but not installed where mpdoctor runs: running it
here raises ModuleNotFoundError: No module named 'wandb' at line 4."""
import keras
import wandb

keras.mixed_precision.set_global_policy("mixed_float16")


def build_model():
    inputs = keras.Input((8,))
    x = keras.layers.Dense(16, activation="relu")(inputs)
    outputs = keras.layers.Dense(2, activation="softmax", dtype="float32")(x)
    wandb.config.update({"units": 16})
    return keras.Model(inputs, outputs)
