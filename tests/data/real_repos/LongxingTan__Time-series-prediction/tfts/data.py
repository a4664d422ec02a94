"""Demo datasets (reduced: the sine wave only)."""

import numpy as np
import pandas as pd  # noqa: F401


def get_data(name="sine", train_length=24, predict_sequence_length=8, test_size=0.2):
    n_examples = 64
    x = np.sin(np.arange(n_examples + train_length + predict_sequence_length) / 4.0)
    inputs = np.stack([x[i : i + train_length] for i in range(n_examples)])[..., None].astype("float32")
    targets = np.stack([x[i + train_length : i + train_length + predict_sequence_length] for i in range(n_examples)])[..., None].astype("float32")
    split = int(n_examples * (1 - test_size))
    return (inputs[:split], targets[:split]), (inputs[split:], targets[split:])
