"""Relative-attention decoder (reduced: standard multi-head attention stands in for RelativeGlobalAttention)."""

import tensorflow as tf
from tensorflow.python import keras


class DecoderLayer(keras.layers.Layer):
    def __init__(self, d_model, rate=0.1, h=4, **kwargs):
        super(DecoderLayer, self).__init__(**kwargs)
        self.rga = tf.keras.layers.MultiHeadAttention(num_heads=h, key_dim=d_model // h)
        self.FFN_pre = tf.keras.layers.Dense(d_model // 2, activation=tf.nn.relu)
        self.FFN_suf = tf.keras.layers.Dense(d_model)
        self.layernorm1 = tf.keras.layers.LayerNormalization(epsilon=1e-6)
        self.dropout = tf.keras.layers.Dropout(rate)

    def call(self, x, mask=None, training=False):
        attn_out = self.rga(x, x, attention_mask=mask)
        out1 = self.layernorm1(x + self.dropout(attn_out, training=training))
        return out1 + self.FFN_suf(self.FFN_pre(out1))


class Encoder(keras.layers.Layer):
    def __init__(self, num_layers, d_model, input_vocab_size, rate=0.1, max_len=None):
        super(Encoder, self).__init__()
        self.embedding = tf.keras.layers.Embedding(input_vocab_size, d_model)
        self.enc_layers = [DecoderLayer(d_model, rate) for _ in range(num_layers)]

    def call(self, x, mask=None, training=False):
        x = self.embedding(x)
        for layer in self.enc_layers:
            x = layer(x, mask=mask, training=training)
        return x
