# Abridged excerpt (see SOURCE.md): NVIDIA DeepLearningExamples, TensorFlow2/Classification/ConvNets/runtime/runner.py.
from importlib import import_module


class Runner:
    def __init__(self, flags, logger):
        self.params = flags
        self.logger = logger
        Model = import_module(self.params.mparams.path_to_impl).Model
        self.model = Model(self.params)

    def train(self):
        self.model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
