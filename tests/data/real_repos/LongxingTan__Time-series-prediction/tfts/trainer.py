"""Keras trainer (reduced: the custom-loop Trainer left out)."""

import logging
import random

import numpy as np
import pandas as pd  # noqa: F401
import tensorflow as tf

logger = logging.getLogger(__name__)


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    tf.random.set_seed(seed)


class KerasTrainer(object):
    def __init__(self, model, fp16=False, strategy=None):
        if fp16:
            self._setup_mixed_precision()
        self.model = model.model if hasattr(model, "model") else model
        self.strategy = strategy or tf.distribute.get_strategy()

    def _setup_mixed_precision(self):
        """Configure mixed precision training."""
        policy = tf.keras.mixed_precision.Policy("mixed_float16")
        tf.keras.mixed_precision.set_global_policy(policy)
        logger.info("Mixed precision enabled.")

    def train(self, train_dataset, valid_dataset=None, optimizer=None, loss_fn=None, epochs=1, batch_size=16, callbacks=None, verbose=0):
        self.model.compile(optimizer=optimizer or tf.keras.optimizers.Adam(), loss=loss_fn or "mse")
        return self.model.fit(train_dataset[0], train_dataset[1], validation_data=valid_dataset, epochs=epochs, batch_size=batch_size, callbacks=callbacks, verbose=verbose)

    def predict(self, x_test, batch_size=1):
        return self.model.predict(x_test, batch_size=batch_size, verbose=0)
