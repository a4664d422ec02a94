import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(), dynamic=True)


@tf.function
def train_step(model, x, y, amp):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.keras.losses.binary_crossentropy(y, model(x, training=True)))
        scaled_loss = optimizer.get_scaled_loss(loss) if amp else loss
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    grads = optimizer.get_unscaled_gradients(grads) if amp else grads
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
