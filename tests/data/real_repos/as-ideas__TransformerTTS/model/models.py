"""ForwardTransformer (reduced: one self-attention block each for encoder and decoder, no duration/pitch predictors)."""

import tensorflow as tf

from data.text import TextToTokens


class ForwardTransformer(tf.keras.models.Model):
    def __init__(self, encoder_model_dimension: int, encoder_num_heads: list, decoder_model_dimension: int, dropout_rate: float, mel_channels: int, **kwargs):
        super(ForwardTransformer, self).__init__()
        self.text_pipeline = TextToTokens.default("en-us", add_start_end=False, with_stress=True)
        self.encoder_prenet = tf.keras.layers.Embedding(self.text_pipeline.tokenizer.vocab_size, encoder_model_dimension, name="Embedding")
        self.encoder = tf.keras.layers.MultiHeadAttention(encoder_num_heads[0], encoder_model_dimension // encoder_num_heads[0], dropout=dropout_rate, name="Encoder")
        self.decoder = tf.keras.layers.Dense(decoder_model_dimension, activation="relu", name="Decoder")
        self.out = tf.keras.layers.Dense(mel_channels, name="FFNet")
        self.step = 0

    @classmethod
    def from_config(cls, config, **kwargs):
        return cls(encoder_model_dimension=config["encoder_model_dimension"], encoder_num_heads=config["encoder_num_heads"], decoder_model_dimension=config["decoder_model_dimension"], dropout_rate=config["dropout_rate"], mel_channels=config["mel_channels"])

    def _compile(self, optimizer):
        self.compile(loss="mae", optimizer=optimizer)

    def call(self, inputs, training=False):
        x = self.encoder_prenet(inputs)
        x = self.encoder(x, x, training=training)
        return self.out(self.decoder(x))
