# Abridged excerpt (see SOURCE.md): the classification head of model/efficientnet_model_v1.py (the real file builds
# it functionally inside the model; here it is reduced to a subclass with the same layers and names).
import tensorflow as tf


class Model(tf.keras.Model):
    def __init__(self, params):
        super().__init__()
        self.pool = tf.keras.layers.GlobalAveragePooling2D()
        self.dropout = tf.keras.layers.Dropout(0.2)
        self.logits = tf.keras.layers.Dense(params.num_classes, name="logits")
        self.probs = tf.keras.layers.Activation("softmax", name="probs", dtype=tf.float32)

    def call(self, images, training=False):
        return self.probs(self.logits(self.dropout(self.pool(images), training=training)))
