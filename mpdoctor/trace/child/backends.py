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


def constant(array):
    """A numpy array as a tensor of the backend (tf_keras's loss containers do not take numpy)."""
    if tensorflow():
        import tensorflow as tf

        return tf.constant(array)
    import keras

    return keras.ops.convert_to_tensor(array)


def to_float32(value):
    """A tensor of any backend as a float32 numpy array."""
    import numpy as np

    if tensorflow():
        import tensorflow as tf

        return np.asarray(tf.cast(tf.convert_to_tensor(value), tf.float32))  # IndexedSlices made dense
    return np.asarray(to_numpy(value), dtype=np.float32)


def mean_float32(value):
    """The mean of a loss tensor, in float32."""
    if tensorflow():
        import tensorflow as tf

        return tf.reduce_mean(tf.cast(value, tf.float32))
    import keras

    return keras.ops.mean(keras.ops.cast(value, "float32"))


def loss_and_gradients(compute, variables: list, state: list, kept: list) -> tuple[float, list]:
    """(the value of `compute()`, a scalar loss, and its gradients with respect to `variables`, float32 numpy
    arrays or None), through the backend's own gradient API: TensorFlow's GradientTape, `jax.value_and_grad` of the
    computation with the variables' values mapped in (keras.StatelessScope, as Keras 3's JAX trainer does; what it
    assigns to the `state` variables, batch statistics and seed states, is assigned afterwards, as an eager step
    would), PyTorch's `backward()`. `kept`: a list `compute` appends lists of tensors to, which come out concrete on
    every backend (inside `jax.value_and_grad` they are tracers)."""
    backend = current()
    if backend == "jax":
        return _jax_gradients(compute, variables, state, kept)
    if backend == "torch":
        return _torch_gradients(compute, variables)
    import tensorflow as tf

    with tf.GradientTape() as tape:
        value = compute()
    grads = tape.gradient(value, variables)
    return float(value), [None if g is None else to_float32(tf.convert_to_tensor(g)) for g in grads]


def _jax_gradients(compute, variables: list, state: list, kept: list) -> tuple[float, list]:
    import jax
    import keras
    import numpy as np

    start = len(kept)

    def loss_of(values):
        with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))) as scope:
            value = compute()
        recorded = kept[start:]
        del kept[start:]
        return value, (recorded, [scope.get_current_value(v) for v in state])

    (value, (recorded, assigned)), grads = jax.value_and_grad(loss_of, has_aux=True)([v.value for v in variables])
    kept.extend(recorded)
    for variable, new in zip(state, assigned, strict=True):
        if new is not None:
            variable.assign(new)
    return float(value), [None if g is None else np.asarray(g, dtype=np.float32) for g in grads]


def _torch_gradients(compute, variables: list) -> tuple[float, list]:
    import torch

    parameters = [v.value for v in variables]
    for parameter in parameters:
        parameter.grad = None
    try:
        with torch.enable_grad():
            value = compute()
            value.backward()
        grads = [None if p.grad is None else p.grad.detach().float().cpu().numpy() for p in parameters]
    finally:
        for parameter in parameters:
            parameter.grad = None
    return float(value.detach()), grads


# The op a non-finite check names: TensorFlow's `op "Square"`, PyTorch's below, JAX's "encountered in square".
OP_NAMED = re.compile(r'op "(\w+)"|encountered in (\w+)')


def op_named(exc: BaseException) -> str | None:
    """The op the exception of `raising_at_first_non_finite` names."""
    match = OP_NAMED.search(str(exc))
    return (match.group(1) or match.group(2)) if match else None


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
