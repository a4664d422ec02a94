import tensorflow as tf


def train(model, dataset, use_amp):
    optimizer = tf.keras.optimizers.Adam(1e-4)
    if use_amp:
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer, dynamic=True)

    @tf.function
    def train_step(features, labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(features, training=True) - labels))
            if use_amp:
                loss = optimizer.get_scaled_loss(loss)
        gradients = tape.gradient(loss, model.trainable_variables)
        if use_amp:
            gradients = optimizer.get_unscaled_gradients(gradients)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))

    for features, labels in dataset:
        train_step(features, labels)
