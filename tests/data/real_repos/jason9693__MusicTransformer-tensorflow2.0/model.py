"""Music Transformer (reduced: the decoder-only model; generation and checkpoint loading left out)."""

import sys  # noqa: F401

from tensorflow.python import keras

import params as par  # noqa: F401
import utils  # noqa: F401
from custom.callback import *  # noqa: F401,F403
from custom.layers import *  # noqa: F401,F403


class MusicTransformerDecoder(keras.Model):
    def __init__(self, embedding_dim=256, vocab_size=388 + 2, num_layer=6, max_seq=2048, dropout=0.2, debug=False, loader_path=None):
        super(MusicTransformerDecoder, self).__init__()
        self.max_seq = max_seq
        self.num_layer = num_layer
        self.embedding_dim = embedding_dim
        self.vocab_size = vocab_size
        self.Decoder = Encoder(num_layers=self.num_layer, d_model=self.embedding_dim, input_vocab_size=self.vocab_size, rate=dropout, max_len=max_seq)  # noqa: F405
        self.fc = keras.layers.Dense(self.vocab_size, activation=None, name="output")

    def call(self, inputs, training=None, eval=None, lookup_mask=None):
        decoder = self.Decoder(inputs, training=training, mask=lookup_mask)
        return keras.activations.softmax(self.fc(decoder))
