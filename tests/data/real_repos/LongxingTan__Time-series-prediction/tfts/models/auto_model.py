"""Builds a model from its config (reduced: the RNN encoder with a dense decoder)."""

import tensorflow as tf
from tensorflow.keras.layers import GRU, Dense, Input, Reshape


class AutoModel(object):
    def __init__(self, model, config, predict_sequence_length=1):
        self.model = model
        self.config = config
        self.predict_sequence_length = predict_sequence_length

    @classmethod
    def from_config(cls, config, predict_sequence_length=1, train_length=24):
        inputs = Input((train_length, 1))
        x = GRU(config.rnn_size)(inputs)
        x = Dense(config.dense_size, activation="relu")(x)
        x = Dense(predict_sequence_length)(x)
        outputs = Reshape((predict_sequence_length, 1))(x)
        return cls(tf.keras.Model(inputs, outputs), config, predict_sequence_length)

    def __call__(self, x):
        return self.model(x)
