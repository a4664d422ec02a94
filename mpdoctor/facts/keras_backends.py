"""Keras 3's backends, as names: which exist, which the trace runs on, what each imports. Which one a run uses is
decided by the parent (mpdoctor.trace.backend_choice) and named to the trace child in KERAS_BACKEND.

Measured on Keras 3.15.1: `keras.src.backend.config` reads keras.json first and lets KERAS_BACKEND override it;
an empty KERAS_BACKEND is ignored. The trace runs on "tensorflow", "jax" and "torch"; Keras' other backends
("numpy", "openvino") cannot train and are not traced.
"""

from __future__ import annotations

BACKEND_ENV = "KERAS_BACKEND"
TENSORFLOW = "tensorflow"
JAX = "jax"
TORCH = "torch"
TRACED_BACKENDS = (TENSORFLOW, JAX, TORCH)
KERAS_BACKENDS = (*TRACED_BACKENDS, "numpy", "openvino")  # what Keras 3.15 accepts
CONFIG_KEY = "keras-backend"
BACKEND_MODULES = {TENSORFLOW: "tensorflow", JAX: "jax", TORCH: "torch"}  # what the trace imports, besides keras
