import tensorflow as tf
from tensorflow.keras.mixed_precision import LossScaleOptimizer

tf.keras.mixed_precision.set_global_policy("mixed_float16")
mlp_optimizer = LossScaleOptimizer(tf.keras.optimizers.SGD(0.1), initial_scale=1024, dynamic=False)


def train_step(model, x, y):
    with tf.GradientTape() as tape:
        unscaled_loss = tf.reduce_mean(tf.keras.losses.binary_crossentropy(y, model(x, training=True)))
        scaled_loss = mlp_optimizer.get_scaled_loss(unscaled_loss)
    gradients = tape.gradient(scaled_loss, model.trainable_variables)
    gradients = mlp_optimizer.get_unscaled_gradients(gradients)
    mlp_optimizer.apply_gradients(zip(gradients, model.trainable_variables))
