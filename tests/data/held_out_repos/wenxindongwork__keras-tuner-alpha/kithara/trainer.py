"""The trainer (upstream: a JAX stateless training loop over sharded batches; here: the same inputs to fit)."""


class Trainer:
    def __init__(self, model, optimizer, train_dataloader, epochs=1, steps=None):
        self.model = model
        self.optimizer = optimizer
        self.train_dataloader = train_dataloader
        self.epochs = epochs
        self.steps = steps

    def train(self):
        self.model.model.compile(optimizer=self.optimizer, loss="sparse_categorical_crossentropy", weighted_metrics=[])
        return self.model.model.fit(self.train_dataloader, epochs=self.epochs, steps_per_epoch=self.steps)
