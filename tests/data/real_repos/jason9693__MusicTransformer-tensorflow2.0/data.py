import pickle  # noqa: F401
import random  # noqa: F401

import numpy as np
from tensorflow.python import keras  # noqa: F401

import params as par
import utils  # noqa: F401


class Data:
    """MIDI event sequences from pickled files (reduced: random sequences stand in for them)."""

    def __init__(self, dir_path):
        self.files = [dir_path + "/%d.pickle" % i for i in range(8)]

    def __repr__(self):
        return "<class Data has " + str(len(self.files)) + " files>"

    def slide_seq2seq_batch(self, batch_size, length, mode="train"):
        data = np.random.randint(0, par.vocab_size, (batch_size, length + 1))
        return data[:, :-1], data[:, 1:]
