"""Imports the precision setup through the decoder and encoder: its run fails in precision.py:5 (ImportError)."""

import tensorflow as tf

from netlib.decoder import build_decoder
from netlib.encoder import build_encoder

model = tf.keras.Sequential([build_encoder(), build_decoder()])
