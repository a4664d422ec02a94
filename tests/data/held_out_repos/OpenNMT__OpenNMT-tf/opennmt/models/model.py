"""The model base class: the loss and its gradients (with the optimizer's loss scaling when it has one)."""

import tensorflow as tf


class Model(tf.keras.layers.Layer):
    def compute_training_loss(self, features, labels, step=None):
        outputs, _ = self(features, labels=labels, training=True, step=step)
        loss = self.compute_loss(outputs, labels, training=True)
        if isinstance(loss, tuple):
            return loss[0] / loss[1], loss[1]
        return loss, None

    def compute_gradients(self, features, labels, optimizer, loss_scale=None, normalize_loss=True):
        with tf.GradientTape() as tape:
            loss, sample_size = self.compute_training_loss(features, labels, step=optimizer.iterations)
            if normalize_loss and sample_size is not None:
                loss /= sample_size
            if loss_scale is not None:
                loss /= loss_scale
            if isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
                scaled_loss = optimizer.get_scaled_loss(loss)
            else:
                scaled_loss = loss

        gradients = tape.gradient(scaled_loss, self.trainable_weights)
        if isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
            gradients = optimizer.get_unscaled_gradients(gradients)
        return loss, gradients, sample_size


class SequenceToSequence(Model):
    def __init__(self, vocab_size, num_units=512):
        super().__init__()
        self.embedding = tf.keras.layers.Embedding(vocab_size, num_units)
        self.encoder = tf.keras.layers.Dense(num_units, activation="relu")
        self.output_layer = tf.keras.layers.Dense(vocab_size)

    def call(self, features, labels=None, training=None, step=None):
        logits = self.output_layer(self.encoder(self.embedding(features["ids"])))
        return {"logits": logits}, None

    def compute_loss(self, outputs, labels, training=True):
        logits = tf.cast(outputs["logits"], tf.float32)
        loss = tf.keras.losses.sparse_categorical_crossentropy(labels["ids_out"], logits, from_logits=True)
        return tf.reduce_sum(loss), tf.cast(tf.size(loss), tf.float32)

    def get_optimizer(self):
        return tf.keras.optimizers.Adam(1e-4)
