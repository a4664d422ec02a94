class AutoConfig(object):
    """Configuration of a model by name (reduced: rnn only)."""

    @classmethod
    def for_model(cls, model_name):
        config = cls()
        config.model_name = model_name
        config.rnn_size = 32
        config.dense_size = 16
        return config
