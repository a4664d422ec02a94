"""Keras 3.x, the `keras` package (tf.keras on TF >= 2.16 unless TF_USE_LEGACY_KERAS is set).

Measured on Keras 3.0.5 (TF 2.16) to 3.15 (TF 2.21): the base classes and `keras.src.dtype_policies` have stayed
where Keras 3.0 put them; a layer's policy moved from the plain attribute `dtype_policy` (3.0) to `_dtype_policy`
behind a `dtype_policy` property (later releases).
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable

from mpdoctor.trace.child.adapters.versions import major_version

LINE = "Keras 3"
PACKAGE = "keras"
PRIVATE_NAMES = (
    "keras.src.layers.layer.Layer",
    "keras.src.models.model.Model",
    "keras.src.dtype_policies.get",  # per-layer policies (numerics, MP504, plan); else mixed_precision.DTypePolicy
    "Layer._dtype_policy",  # ditto; Keras 3.0 keeps the policy in the attribute `dtype_policy` itself
    "keras.src.utils.naming.reset_uids",  # layer names of a second build as the user's first build had them
)


def handles(package: types.ModuleType) -> bool:
    return package.__name__ == PACKAGE and major_version(package) == 3


def install(hooks, package: types.ModuleType) -> None:
    from keras.src.layers.layer import Layer
    from keras.src.models.model import Model

    from mpdoctor.trace.child.hooks import first

    keras = package
    hooks.function(keras.config.set_dtype_policy, hooks.record_policy("keras.mixed_precision.set_global_policy"))
    hooks.function(keras.config.set_floatx, hooks.record_policy("keras.config.set_floatx"))
    hooks.function(
        keras.saving.load_model, hooks.record_restore("keras.models.load_model", first), (0, "filepath", "load")
    )
    hooks.layer_classes(Layer, Model, "keras")
    hooks.model_io(Model, ("save", "export"))
    hooks.savedmodel_layer(keras.layers.TFSMLayer, "keras.layers.TFSMLayer", "filepath")


def model_class(package: types.ModuleType) -> type:
    from keras.src.models.model import Model

    return Model


def policy_object(package: types.ModuleType, policy: str):
    try:
        policies = importlib.import_module("keras.src.dtype_policies")
    except ImportError:
        return package.mixed_precision.DTypePolicy(policy)
    return policies.get(policy)


def set_policy(layer, package: types.ModuleType, policy: str) -> Callable[[], None]:
    """Give a layer another dtype policy in place; returns the undo. Keras 3 reads the policy on every call. The
    public setter is not used: on a layer holding a DTypePolicyMap it would edit the map, which other layers
    share."""
    attribute = "_dtype_policy" if hasattr(layer, "_dtype_policy") else "dtype_policy"
    saved = getattr(layer, attribute)
    setattr(layer, attribute, policy_object(package, policy))
    return lambda: setattr(layer, attribute, saved)


def reset_names(package: types.ModuleType) -> None:
    """Restart the automatic layer names (`dense`, `dense_1`, ...) as in a fresh process."""
    from keras.src.utils import naming

    naming.reset_uids()
