"""Synthetic recommender models: embeddings, an MLP, one logit."""

import tensorflow as tf
from tensorflow import keras


class InputGenerator(keras.utils.Sequence):
    def __init__(self, model_config, batch_size, num_batches=1):
        self.model_config = model_config
        self.batch_size = batch_size
        self.num_batches = num_batches

    def __len__(self):
        return self.num_batches

    def __getitem__(self, idx):
        cat = [tf.random.uniform([self.batch_size, 1], maxval=rows, dtype=tf.int64) for rows, _ in self.model_config["embedding_dims"]]
        numerical = tf.random.uniform([self.batch_size, 13], dtype=tf.float32)
        labels = tf.random.uniform(shape=[self.batch_size, 1], maxval=2, dtype=tf.int32)
        return (numerical, cat), labels


class SyntheticModelNative(keras.Model):
    def __init__(self, model_config, embedding_device="/GPU:0"):
        super().__init__()
        self.embeddings = [keras.layers.Embedding(rows, width) for rows, width in model_config["embedding_dims"]]
        self.mlp = keras.Sequential()
        for size in model_config["mlp_sizes"]:
            self.mlp.add(keras.layers.Dense(size, activation="relu"))
        self.mlp.add(keras.layers.Dense(1, activation=None))

    def call(self, inputs):
        numerical_features, cat_features = inputs
        embedded = [tf.squeeze(layer(ids), 1) for layer, ids in zip(self.embeddings, cat_features)]
        x = tf.concat([tf.cast(numerical_features, embedded[0].dtype)] + embedded, axis=1)
        return self.mlp(x)
