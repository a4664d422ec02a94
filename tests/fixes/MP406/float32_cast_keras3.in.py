# fix-options: --unsafe-fixes
"""Keras 3: a float32 cast combined with float16 tensors (raises), and keras.ops upcasting silently."""
import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

keras.mixed_precision.set_global_policy("mixed_float16")


class ResidualGate(layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.proj = layers.Dense(units)

    def call(self, inputs):
        gate = tf.sigmoid(tf.cast(self.proj(inputs), tf.float32))
        return inputs * gate + inputs


class NoiseInjection(layers.Layer):
    def call(self, x, training=False):
        noise = keras.random.normal(ops.shape(x), stddev=0.05)
        return ops.add(x, noise)


class CastToLayerDtype(layers.Layer):
    def call(self, x):
        features = ops.cast(x, self.dtype)
        return ops.concatenate([x, features], axis=-1)


inputs = keras.Input((16,))
x = ResidualGate(16)(inputs)
x = NoiseInjection()(x)
x = CastToLayerDtype()(x)
model = keras.Model(inputs, layers.Dense(1, dtype="float32")(x))

if __name__ == "__main__":
    print(model.predict(np.random.randn(2, 16), verbose=0))
