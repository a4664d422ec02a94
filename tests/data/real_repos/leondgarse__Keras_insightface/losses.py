"""ArcFace margin loss (reduced)."""

import tensorflow as tf


class ArcfaceLoss(tf.keras.losses.Loss):
    def __init__(self, margin=0.5, scale=64.0, **kwargs):
        super().__init__(**kwargs)
        self.margin, self.scale = margin, scale

    def call(self, y_true, norm_logits):
        norm_logits = tf.cast(norm_logits, "float32")
        theta = tf.acos(tf.clip_by_value(norm_logits, -1 + 1e-5, 1 - 1e-5))
        logits = tf.where(tf.cast(y_true, tf.bool), tf.cos(theta + self.margin), norm_logits)
        return tf.keras.losses.categorical_crossentropy(y_true, logits * self.scale, from_logits=True)
