"""BERT as a Keras layer (reduced: the embeddings and one Keras attention block stand in for the encoder stack)."""

from __future__ import absolute_import, division, print_function

from tensorflow import keras

from bert.layer import Layer


class BertModelLayer(Layer):
    class Params(Layer.Params):
        vocab_size = None
        hidden_size = 768
        num_heads = 12
        max_position_embeddings = 512

    def _construct(self, **kwargs):
        super()._construct(**kwargs)
        self.embeddings_layer = keras.layers.Embedding(self.params.vocab_size, self.params.hidden_size, name="word_embeddings")
        self.attention = keras.layers.MultiHeadAttention(self.params.num_heads, self.params.hidden_size // self.params.num_heads, name="attention")
        self.norm = keras.layers.LayerNormalization(name="LayerNorm")
        self.support_masking = True

    def call(self, inputs, mask=None, training=None):
        embedding_output = self.embeddings_layer(inputs)
        return self.norm(embedding_output + self.attention(embedding_output, embedding_output))
