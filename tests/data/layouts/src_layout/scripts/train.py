"""A script of the src-layout project: `python scripts/train.py` raises ModuleNotFoundError "No module named
'stepnet'"; with PYTHONPATH=src (as after `pip install -e .`) it builds the model."""
import keras

from stepnet.model import build_model


def create_model():
    keras.utils.set_random_seed(0)
    return build_model()
