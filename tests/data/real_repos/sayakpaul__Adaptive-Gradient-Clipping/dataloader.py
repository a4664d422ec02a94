"""Flowers TFRecords loader (reduced: the GCS TFRecords stood in for by random images of the same shape)."""

import numpy as np
import tensorflow as tf

GCS_PATTERN = "gs://flowers-public/tfrecords-jpeg-224x224/*.tfrec"
AUTO = tf.data.AUTOTUNE


def create_steps(batch_size, validation_split=0.15):
    train_filenames, valid_filenames = ["flowers00-230.tfrec"], ["flowers15-230.tfrec"]
    return train_filenames, valid_filenames, 2


def _random_dataset(batch_size, n):
    images = np.random.rand(n, 96, 96, 3).astype("float32")
    labels = tf.one_hot(np.random.randint(0, 5, n), 5)
    return tf.data.Dataset.from_tensor_slices((images, labels)).batch(batch_size).prefetch(AUTO)


def get_training_dataset(batch_size, filenames):
    return _random_dataset(batch_size, batch_size * 2).repeat()


def get_validation_dataset(batch_size, filenames):
    return _random_dataset(batch_size, batch_size)
