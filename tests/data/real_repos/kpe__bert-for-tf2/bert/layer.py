from __future__ import absolute_import, division, print_function

import params_flow as pf
import tensorflow as tf


class Layer(pf.Layer):
    """Common abstract base layer for all BERT layers."""

    class Params(pf.Layer.Params):
        initializer_range = 0.02

    def create_initializer(self):
        return tf.keras.initializers.TruncatedNormal(stddev=self.params.initializer_range)
