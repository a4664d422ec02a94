"""tf_keras: a GAN step with two LossScaleOptimizers (get_scaled_loss / get_unscaled_gradients for each)."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
LATENT = 8

generator = tf.keras.Sequential(
    [tf.keras.Input((LATENT,)), tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(16, dtype="float32")]
)
discriminator = tf.keras.Sequential(
    [tf.keras.Input((16,)), tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(1, dtype="float32")]
)
g_opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(2e-4, beta_1=0.5))
d_opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(2e-4, beta_1=0.5))
bce = tf.keras.losses.BinaryCrossentropy(from_logits=True)


@tf.function
def train_step(real):
    noise = tf.random.normal([tf.shape(real)[0], LATENT])
    with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:
        fake = generator(noise, training=True)
        real_logits = discriminator(real, training=True)
        fake_logits = discriminator(fake, training=True)
        d_loss = bce(tf.ones_like(real_logits), real_logits) + bce(tf.zeros_like(fake_logits), fake_logits)
        g_loss = bce(tf.ones_like(fake_logits), fake_logits)
        d_scaled = d_opt.get_scaled_loss(d_loss)
        g_scaled = g_opt.get_scaled_loss(g_loss)
    d_grads = d_opt.get_unscaled_gradients(d_tape.gradient(d_scaled, discriminator.trainable_variables))
    g_grads = g_opt.get_unscaled_gradients(g_tape.gradient(g_scaled, generator.trainable_variables))
    d_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables))
    g_opt.apply_gradients(zip(g_grads, generator.trainable_variables))
    return d_loss, g_loss


real_batch = np.random.RandomState(0).normal(size=(32, 16)).astype("float32")

if __name__ == "__main__":
    for _ in range(5):
        train_step(real_batch)
