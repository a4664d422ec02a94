# fix-options: --unsafe-fixes
"""Custom layers written for float32 that break when mixed_float16 is switched on (tf_keras)."""
import numpy as np
import tensorflow as tf
import tf_keras as keras
from tf_keras import backend as K
from tf_keras import layers

keras.mixed_precision.set_global_policy("mixed_float16")


class GaussianScale(layers.Layer):
    def __init__(self, stddev=0.1, **kwargs):
        super().__init__(**kwargs)
        self.stddev = stddev

    def build(self, input_shape):
        self.scale = tf.Variable(tf.cast(tf.ones(input_shape[-1:]), self.compute_dtype), trainable=True)

    def call(self, inputs, training=None):
        noise = tf.random.normal(tf.shape(inputs), stddev=self.stddev, dtype=self.compute_dtype)
        x = inputs + noise
        return x * self.scale


class ScaledDotProduct(layers.Layer):
    def __init__(self, key_dim, **kwargs):
        super().__init__(**kwargs)
        self.key_dim = key_dim

    def call(self, inputs):
        scores = tf.matmul(inputs, inputs, transpose_b=True)
        scores = scores / tf.math.sqrt(tf.cast(float(self.key_dim), self.compute_dtype))
        bias = tf.ones(tf.shape(scores), dtype=self.compute_dtype)
        return tf.matmul(tf.nn.softmax(scores + bias), inputs)


class PadFeatures(layers.Layer):
    def call(self, inputs):
        batch = tf.shape(inputs)[0]
        pad = tf.zeros((batch, tf.shape(inputs)[1], 4), dtype=self.compute_dtype)
        return tf.concat([inputs, pad], axis=-1)


inputs = keras.Input((12, 8))
x = GaussianScale()(inputs)
x = ScaledDotProduct(8)(x)
x = PadFeatures()(x)
x = layers.Lambda(lambda t: t * tf.constant(0.5, dtype=t.dtype))(x)
outputs = layers.Dense(1, dtype="float32")(layers.GlobalAveragePooling1D()(x))
model = keras.Model(inputs, outputs)

if __name__ == "__main__":
    print(model.predict(np.random.randn(2, 12, 8), verbose=0))
