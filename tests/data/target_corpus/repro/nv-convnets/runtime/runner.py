import tensorflow as tf


class Runner:
    def __init__(self, model, use_amp):
        optimizer = tf.keras.optimizers.SGD(0.1, momentum=0.9)
        if use_amp:
            optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(optimizer, "dynamic")
        self.model = model
        self.optimizer = optimizer

    @tf.function
    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, self.model(x, training=True)))
            loss = self.optimizer.get_scaled_loss(loss)
        gradients = tape.gradient(loss, self.model.trainable_variables)
        gradients = self.optimizer.get_unscaled_gradients(gradients)
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables))
