"""The training loop; wraps the optimizer for loss scaling when mixed precision is on."""

import tensorflow as tf

from opennmt.utils import misc


class Trainer:
    def __init__(self, model, optimizer):
        self._model = model
        self._mixed_precision = misc.mixed_precision_enabled()
        if optimizer is None:
            raise ValueError("No optimizer is defined")
        if self._mixed_precision and not isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
        self._optimizer = optimizer

    def __call__(self, dataset, max_step=None):
        for step, (features, labels) in enumerate(dataset):
            loss, gradients, _ = self._model.compute_gradients(features, labels, self._optimizer)
            self._optimizer.apply_gradients(zip(gradients, self._model.trainable_weights))
            if max_step is not None and step >= max_step:
                break
        return loss
