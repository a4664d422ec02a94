import tensorflow as tf


def freeze_all(model, frozen=True):
    model.trainable = not frozen
    if isinstance(model, tf.keras.Model):
        for layer in model.layers:
            freeze_all(layer, frozen)
