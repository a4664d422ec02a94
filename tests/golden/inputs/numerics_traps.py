"""Golden input: float16 traps the numerics pass sees (MP403/MP404/MP407 trace forms), downgrades and MP405."""
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")


class RMSNormBad(keras.layers.Layer):
    def call(self, x):
        var = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)
        return x * tf.math.rsqrt(var + 1e-12)


class MaskedSoftmaxBad(keras.layers.Layer):
    def call(self, x):
        mask = tf.cast(x > 0.5, x.dtype)
        return tf.nn.softmax(x + (1.0 - mask) * -1e9)


class SafeNorm(keras.layers.Layer):
    def call(self, x):
        return tf.cast(self.normalize(tf.cast(x, tf.float32)), x.dtype)

    def normalize(self, v):
        var = tf.reduce_mean(tf.square(v), axis=-1, keepdims=True)
        return v * tf.math.rsqrt(var + 1e-12)


def variance(t):
    return tf.reduce_mean(t * t, axis=-1, keepdims=True) - tf.square(tf.reduce_mean(t, axis=-1, keepdims=True))


inputs = keras.Input((8,))
rows = keras.layers.Dense(8, kernel_initializer="zeros", name="pad")(inputs)
bad_norm = keras.Model(inputs, keras.layers.Activation("linear", dtype="float32")(RMSNormBad()(rows)))

inputs = keras.Input((8,))
bad_mask = keras.Model(inputs, keras.layers.Activation("linear", dtype="float32")(MaskedSoftmaxBad()(inputs)))

inputs = keras.Input((8,))
safe = keras.Model(inputs, keras.layers.Activation("linear", dtype="float32")(SafeNorm()(inputs)))

inputs = keras.Input((4,))
shifted = keras.layers.Dense(4, kernel_initializer="identity",
                             bias_initializer=keras.initializers.Constant(100.0))(inputs)
spread = keras.layers.Lambda(variance, name="variance")(shifted)
diverging = keras.Model(inputs, keras.layers.Activation("linear", dtype="float32")(spread))
