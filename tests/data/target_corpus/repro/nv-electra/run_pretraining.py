import tensorflow as tf

policy = tf.keras.mixed_precision.experimental.Policy("mixed_float16", loss_scale="dynamic")
tf.keras.mixed_precision.experimental.set_policy(policy)
optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(tf.keras.optimizers.Adam(), "dynamic")


@tf.function
def train_one_step(model, features):
    with tf.GradientTape() as tape:
        total_loss = tf.reduce_mean(model(features, training=True))
        total_loss = optimizer.get_scaled_loss(total_loss)
    gradients = tape.gradient(total_loss, model.trainable_variables)
    gradients = optimizer.get_unscaled_gradients(gradients)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
