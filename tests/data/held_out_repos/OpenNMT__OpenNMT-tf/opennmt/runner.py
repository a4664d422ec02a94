"""Runs training from a configuration."""

from opennmt import training as training_util
from opennmt.utils import misc


class Runner:
    def __init__(self, model_fn, config, mixed_precision=False):
        self._model_fn = model_fn
        self._config = config
        self._mixed_precision = mixed_precision

    def _init_model(self, config):
        return self._model_fn()

    def train(self, dataset, max_step=None):
        mixed_precision = self._mixed_precision and misc.enable_mixed_precision()
        model = self._init_model(self._config)
        optimizer = model.get_optimizer()
        trainer = training_util.Trainer(model, optimizer)
        loss = trainer(dataset, max_step=max_step)
        if mixed_precision:
            misc.disable_mixed_precision()
        return loss
