# fix-options: --unsafe-fixes
"""tf_keras (Keras 2) custom loop under mixed_float16: apply_gradients without get_scaled_loss."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf
from tensorflow.keras import layers, mixed_precision

mixed_precision.set_global_policy("mixed_float16")

model = tf.keras.Sequential([
    layers.Conv2D(16, 3, activation="relu", input_shape=(28, 28, 1)),
    layers.GlobalAveragePooling2D(),
    layers.Dense(10),
    layers.Activation("softmax", dtype="float32"),
])
opt = tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
loss_object = tf.keras.losses.SparseCategoricalCrossentropy()


@tf.function
def train_step(images, labels):
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = loss_object(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)
    gradients = [tf.clip_by_norm(g, 1.0) for g in gradients]
    opt.apply_gradients(zip(gradients, model.trainable_variables))
    return loss


images = np.random.rand(8, 28, 28, 1).astype("float32")
labels = np.random.randint(0, 10, 8)
train_step(images, labels)
