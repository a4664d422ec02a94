"""tf_keras, the Keras 2 package: tf.keras on TF >= 2.16 with TF_USE_LEGACY_KERAS=1 (tf_keras 2.16+), also
installed beside Keras 2 on TF 2.14-2.15 (tf_keras 2.14-2.15, which a file may import by name). Keras 2's codebase
under the name tf_keras: the hooks are those of mpdoctor/trace/child/adapters/keras2.py.
"""

from __future__ import annotations

import types

from mpdoctor.trace.child.adapters import keras2

LINE = "tf_keras"
PACKAGE = "tf_keras"
PRIVATE_NAMES = (
    "tf_keras.src.engine.base_layer.Layer",
    "tf_keras.src.engine.training.Model",
    "Layer._set_dtype_policy",  # per-layer policies (numerics, MP504, plan), with the two below
    "Layer._dtype_policy",
    "Layer._compute_dtype_object",
)


def handles(package: types.ModuleType) -> bool:
    return package.__name__ == PACKAGE


def install(hooks, package: types.ModuleType) -> None:
    keras2.install_line(hooks, package)


def model_class(package: types.ModuleType) -> type:
    return keras2.model_class(package)


set_policy = keras2.set_policy
reset_names = keras2.reset_names
