# fix-options: --target-tensorflow >=2.16
"""A tf_keras step ported to Keras 3 (the NVIDIA UNet pattern): `if amp: gradients =
optimizer.get_unscaled_gradients(gradients)`. Dropping the call must not leave `gradients = gradients` behind: the
statement goes, and so does the `if` it leaves empty (issue 19)."""
import keras
import numpy as np
import tensorflow as tf

amp = True
keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1, dtype="float32")])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        if amp:
            loss = optimizer.scale_loss(loss)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss


@tf.function
def train_step_with_arms(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        scaled_loss = optimizer.scale_loss(loss) if amp else loss
    scaled_gradients = tape.gradient(scaled_loss, model.trainable_variables)
    gradients = scaled_gradients
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss
