import tensorflow as tf
from tensorflow.keras.layers import Layer


class GELU(Layer):
    """Gaussian Error Linear Unit (tanh approximation)."""

    def __init__(self, trainable=False, **kwargs):
        super(GELU, self).__init__(**kwargs)
        self.supports_masking = True
        self.trainable = trainable

    def call(self, inputs, mask=None):
        return 0.5 * inputs * (1.0 + tf.math.tanh(0.7978845608028654 * (inputs + 0.044715 * tf.math.pow(inputs, 3))))
