"""Imports PyTorch (not installed here): an ML framework gets no stand-in, the run stops at line 5 with 'not traced'."""

import keras
import mpdoctor_fixture_frames  # noqa: F401
import torch


def build_model():
    return keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(torch.cuda.device_count() + 1)])
