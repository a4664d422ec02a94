"""The Keras backend the trace child runs on, and the few tensor operations the child needs on any backend.

The parent names the backend to the child in KERAS_BACKEND whenever it was chosen by anything but the default
(mpdoctor.trace.checks.child_environment), so the child knows it before importing anything: on JAX or PyTorch
TensorFlow is never imported (a JAX user has none installed), and what the child reads of a tensor goes through
`keras.ops` and numpy. In a Jupyter kernel (live_facts) the Keras already imported says which backend it runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator

from mpdoctor.facts.keras_backends import BACKEND_ENV, TENSORFLOW


def current() -> str:
    """ "tensorflow", "jax" or "torch": the imported Keras 3's own answer, else what the child was started with."""
    keras = sys.modules.get("keras")
    config = getattr(keras, "config", None)
    if config is not None and hasattr(config, "backend"):
        try:
            return str(config.backend())
        except Exception:  # a Keras half imported: what the environment says
            pass
    return os.environ.get(BACKEND_ENV) or TENSORFLOW


def tensorflow() -> bool:
    return current() == TENSORFLOW


def to_numpy(tensor):
    """A tensor of any backend (or a numpy array) as a numpy array, on the host."""
    import numpy as np

    if isinstance(tensor, np.ndarray):
        return tensor
    import keras

    return keras.ops.convert_to_numpy(tensor)


def is_tensor(value) -> bool:
    """A tensor of the backend (not a variable: variables are the model's own)."""
    if "keras" not in sys.modules:
        return False
    import keras

    if isinstance(value, keras.Variable):
        return False
    try:
        return bool(keras.ops.is_tensor(value))
    except Exception:
        return False


def dtype_of(value) -> str | None:
    """A tensor's dtype as Keras names it ("float16", "float32"...), None for what is not a tensor."""
    import keras

    try:
        return keras.backend.standardize_dtype(value.dtype)
    except Exception:
        return None


# The op a non-finite check names: TensorFlow's `op "Square"`, PyTorch's below, JAX's "encountered in square".
OP_NAMED = re.compile(r'op "(\w+)"|encountered in (\w+)')


@contextlib.contextmanager
def raising_at_first_non_finite() -> Iterator[None]:
    """Run eagerly with every op checked: the first op whose output holds inf or NaN raises, naming the op, with the
    Python frames that ran it in the traceback (TensorFlow's check_numerics, JAX's debug_infs/debug_nans, a
    PyTorch function mode)."""
    backend = current()
    if backend == "jax":
        import jax

        with jax.debug_infs(True), jax.debug_nans(True):
            yield
    elif backend == "torch":
        with _torch_checking()():
            yield
    else:
        import tensorflow as tf

        tf.debugging.enable_check_numerics()
        try:
            yield
        finally:
            tf.debugging.disable_check_numerics()


def _torch_checking() -> type:
    import torch
    from torch.overrides import TorchFunctionMode

    class Checking(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.is_floating_point() and not bool(torch.isfinite(out).all()):
                raise FloatingPointError(f'a non-finite output of op "{getattr(func, "__name__", func)}"')
            return out

    return Checking
