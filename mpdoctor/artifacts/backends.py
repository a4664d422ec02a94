"""TensorFlow, h5py and ml_dtypes, imported when a reader first needs them, quietly.

Listing an HDF5 file needs no TensorFlow, so nothing here is imported at module level; TensorFlow's import and first
eager op print absl/CUDA lines on the C-level stderr, which `quiet_stderr` silences.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import warnings

import numpy as np

from mpdoctor.artifacts.errors import CheckpointError

_tf_module = None
_eager_ready = False


@contextlib.contextmanager
def quiet_stderr():
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def load_tensorflow():
    global _tf_module
    if _tf_module is None:
        if "tensorflow" in sys.modules and hasattr(sys.modules["tensorflow"], "train"):
            _tf_module = sys.modules["tensorflow"]
        else:
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            try:
                with quiet_stderr():
                    import tensorflow as tf
            except ImportError as exc:
                raise CheckpointError("tensorflow", f"TensorFlow is needed to read TF checkpoints: {exc}") from None
            _tf_module = tf
    return _tf_module


def eager_tensorflow():
    global _eager_ready
    tf = load_tensorflow()
    if not _eager_ready:
        with quiet_stderr():
            tf.constant(0)
        _eager_ready = True
    return tf


def tf_message(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    text = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    text = re.sub(r"^Unsuccessful TensorSliceReader constructor: ", "", text)
    text = re.sub(r"\s*\[Op:\w+\].*$", "", text)
    return text if len(text) <= 240 else text[:237] + "..."


def load_h5py():
    try:
        import h5py
    except ImportError as exc:
        raise CheckpointError("h5py", f"h5py is needed to read HDF5 weights: {exc}") from None
    return h5py


def bfloat16_dtype():
    try:
        import ml_dtypes
    except ImportError as exc:
        raise CheckpointError("ml_dtypes", f"ml_dtypes is needed for bfloat16: {exc}") from None
    return np.dtype(ml_dtypes.bfloat16)


def numpy_dtype(name: str) -> np.dtype:
    return bfloat16_dtype() if name == "bfloat16" else np.dtype(name)
