"""Keras 2 as the `keras` package: tf.keras on TF 2.13-2.15 (Keras 2.13-2.15). The same codebase as tf_keras
(mpdoctor/trace/child/adapters/tf_keras.py) under another package name. The hooked functions are replaced in
their defining modules too, so the API modules `tf.keras` loads later (`keras.api._v2.keras`) re-export the hooks.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable

from mpdoctor.trace.child.adapters.versions import major_version

_MISSING = object()

LINE = "Keras 2"
PACKAGE = "keras"
PRIVATE_NAMES = (
    "keras.src.engine.base_layer.Layer",
    "keras.src.engine.training.Model",
    "Layer._set_dtype_policy",  # per-layer policies (numerics, MP504, plan), with the two below
    "Layer._dtype_policy",
    "Layer._compute_dtype_object",
)


def handles(package: types.ModuleType) -> bool:
    return package.__name__ == PACKAGE and major_version(package) == 2


def install(hooks, package: types.ModuleType) -> None:
    install_line(hooks, package)


def install_line(hooks, package: types.ModuleType) -> None:
    """The hooks of a Keras 2 codebase named `package.__name__` (keras 2.13-2.15 or tf_keras)."""
    from mpdoctor.trace.child.hooks import first

    name = package.__name__
    layer_class = importlib.import_module(f"{name}.src.engine.base_layer").Layer
    model = model_class(package)
    hooks.function(
        package.mixed_precision.set_global_policy, hooks.record_policy(f"{name}.mixed_precision.set_global_policy")
    )
    hooks.function(package.backend.set_floatx, hooks.record_policy(f"{name}.backend.set_floatx"))
    hooks.function(
        package.models.load_model, hooks.record_restore(f"{name}.models.load_model", first), (0, "filepath", "load")
    )
    hooks.layer_classes(layer_class, model, name)
    hooks.model_io(model, ("save",))


def model_class(package: types.ModuleType) -> type:
    return importlib.import_module(f"{package.__name__}.src.engine.training").Model


def set_policy(layer, package: types.ModuleType, policy: str) -> Callable[[], None]:
    """Give a layer another dtype policy in place; returns the undo. `_set_dtype_policy` sets the policy and the
    compute dtype object Keras 2 caches beside it; the undo puts both back."""
    saved_policy = layer._dtype_policy
    compute_object = layer.__dict__.get("_compute_dtype_object", _MISSING)
    layer._set_dtype_policy(policy)

    def undo() -> None:
        layer._dtype_policy = saved_policy
        if compute_object is _MISSING:
            layer.__dict__.pop("_compute_dtype_object", None)
        else:
            layer._compute_dtype_object = compute_object

    return undo


def reset_names(package: types.ModuleType) -> None:
    """Restart the automatic layer names (`dense`, `dense_1`, ...) as in a fresh process (public in Keras 2)."""
    package.backend.reset_uids()
