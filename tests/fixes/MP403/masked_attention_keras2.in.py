# fix-options: --unsafe-fixes
"""BERT-style masked self-attention written for TF 1.x float32, run under mixed_float16 with tf_keras."""
import numpy as np
import tensorflow as tf
import tf_keras as keras
from tf_keras import layers, mixed_precision

mixed_precision.set_global_policy("mixed_float16")

NEG_INF = -1e9


class MaskedSelfAttention(layers.Layer):
    def __init__(self, num_heads, key_dim, epsilon=1e-12, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.epsilon = epsilon
        self.qkv = layers.Dense(3 * num_heads * key_dim)
        self.out = layers.Dense(num_heads * key_dim)

    def _scores(self, q, k, mask):
        scores = tf.matmul(q, k, transpose_b=True) * self.key_dim**-0.5
        adder = (1.0 - tf.cast(mask[:, None, :], scores.dtype)) * NEG_INF
        return scores + adder

    def call(self, inputs, mask):
        q, k, v = tf.split(self.qkv(inputs), 3, axis=-1)
        probs = tf.nn.softmax(self._scores(q, k, mask), axis=-1)
        mean, var = tf.nn.moments(inputs, axes=[-1], keepdims=True)
        normed = (inputs - mean) * tf.math.rsqrt(var + self.epsilon)
        return self.out(tf.matmul(probs, v)) + normed


tokens = keras.Input((16, 32))
mask = keras.Input((16,))
x = MaskedSelfAttention(4, 8)(tokens, mask)
x = layers.Lambda(lambda t: tf.where(t > 0.0, t, -1e10))(x)
logits = layers.Dense(2, dtype="float32")(layers.GlobalAveragePooling1D()(x))
model = keras.Model([tokens, mask], logits)

if __name__ == "__main__":
    out = model.predict([np.random.randn(2, 16, 32), np.ones((2, 16))], verbose=0)
    print("finite:", np.isfinite(out).all())
