"""What the trace child needs to know of each Keras line's internals: where its Layer and Model classes live, how to
read the global policy, and which APIs to hook. Everything version-specific of the child is here.

Private names touched, per line:
- Keras 3 (`keras`): `keras.src.layers.layer.Layer`, `keras.src.models.model.Model`.
- tf_keras (Keras 2): `tf_keras.src.engine.base_layer.Layer`, `tf_keras.src.engine.training.Model`.
"""

from __future__ import annotations

import ast
import contextlib
import os
import sys

from mpdoctor.facts.dtypes import dtype_name
from mpdoctor.facts.keras_semantics import (
    LEGACY_KERAS_ENV,
    file_legacy_keras_setting,
    imported_roots,
    legacy_keras_env,
)
from mpdoctor.trace.child.hooks import Hooks, first


def flavours(tree: ast.AST) -> set[str]:
    """The Keras lines (and tensorflow_hub) a file may use: "keras", "tf_keras", "hub". Only their hooks are
    installed, so a Keras 3 file never pays for importing tf_keras and the other way round."""
    roots = imported_roots(tree)
    legacy = legacy_keras_env()
    found = {"keras"}
    if legacy or "tf_keras" in roots:
        found.add("tf_keras")
    if legacy and "keras" not in roots:
        found.discard("keras")
    if "tensorflow_hub" in roots:
        found.add("hub")
    return found


def honour_legacy_request(tree: ast.AST) -> None:
    """A file that sets TF_USE_LEGACY_KERAS gets tf_keras: TensorFlow resolves `tf.keras` on first use, after the
    file set the variable, so the child (which installs its hooks before the file runs) sets it the same way."""
    setting = file_legacy_keras_setting(tree)
    if setting == "set":
        os.environ[LEGACY_KERAS_ENV] = "1"
    elif setting == "default":
        os.environ.setdefault(LEGACY_KERAS_ENV, "1")


def set_global_policy(policy: str, wanted: set[str]) -> None:
    """Set the global dtype policy of each Keras line in `wanted` (the policy a project's entry point sets before
    it reaches the module traced, or --assume-policy's: another module of the user's program sets it)."""
    if "keras" in wanted:
        import keras

        keras.mixed_precision.set_global_policy(policy)
    if "tf_keras" in wanted:
        import tf_keras

        tf_keras.mixed_precision.set_global_policy(policy)


def install(hooks: Hooks, wanted: set[str]) -> None:
    """Every hook for TensorFlow and the Keras lines in `wanted`, then the re-exported functions replaced."""
    hooks.install_tensorflow()
    if "keras" in wanted:
        _install_keras3(hooks)
    if "tf_keras" in wanted:
        _install_tf_keras(hooks)
    if "hub" in wanted:
        _install_hub(hooks)
    hooks.patch()


def _install_keras3(hooks: Hooks) -> None:
    import keras
    from keras.src.layers.layer import Layer
    from keras.src.models.model import Model

    hooks.function(keras.config.set_dtype_policy, hooks.record_policy("keras.mixed_precision.set_global_policy"))
    hooks.function(keras.config.set_floatx, hooks.record_policy("keras.config.set_floatx"))
    hooks.function(
        keras.saving.load_model, hooks.record_restore("keras.models.load_model", first), (0, "filepath", "load")
    )
    hooks.layer_classes(Layer, Model, "keras")
    hooks.model_io(Model, ("save", "export"))
    hooks.savedmodel_layer(keras.layers.TFSMLayer, "keras.layers.TFSMLayer", "filepath")


def _install_tf_keras(hooks: Hooks) -> None:
    import tf_keras
    from tf_keras.src.engine.base_layer import Layer
    from tf_keras.src.engine.training import Model

    hooks.function(
        tf_keras.mixed_precision.set_global_policy, hooks.record_policy("tf_keras.mixed_precision.set_global_policy")
    )
    hooks.function(tf_keras.backend.set_floatx, hooks.record_policy("tf_keras.backend.set_floatx"))
    hooks.function(
        tf_keras.models.load_model, hooks.record_restore("tf_keras.models.load_model", first), (0, "filepath", "load")
    )
    hooks.layer_classes(Layer, Model, "tf_keras")
    hooks.model_io(Model, ("save",))


def _install_hub(hooks: Hooks) -> None:
    import tensorflow_hub as hub

    hooks.savedmodel_function(hub.load, "hub.load", (0, "handle", "load"))
    hooks.savedmodel_layer(hub.KerasLayer, "hub.KerasLayer", "handle")


def model_classes() -> tuple[type, ...]:
    """The Model base classes of the Keras lines already imported."""
    classes = []
    if "keras" in sys.modules:
        from keras.src.models.model import Model

        classes.append(Model)
    if "tf_keras" in sys.modules:
        from tf_keras.src.engine.training import Model as Model2

        classes.append(Model2)
    return tuple(classes)


def policy_now() -> str | None:
    """The global dtype policy in force (tf_keras' when both lines are loaded, as before)."""
    policy = None
    for name in ("keras", "tf_keras"):
        module = sys.modules.get(name)
        if module is not None:
            with contextlib.suppress(Exception):
                policy = dtype_name(module.mixed_precision.global_policy())
    return policy


# ---------------------------------------------------------------------------------------------- per-layer policies


def set_layer_policy(layer, policy: str) -> tuple:
    """Switch one built layer's dtype policy in place (what it computes in from its next call on; its variables stay
    as they are, float32 under every `mixed_*` policy); returns what `restore_layer_policy` needs.
    tf_keras caches the compute dtype object next to the policy (`_set_dtype_policy` sets both); Keras 3 reads the
    policy on every call. The Keras 3 setter is not used: on a layer holding a DTypePolicyMap it would edit the
    map, which other layers share."""
    if hasattr(layer, "_set_dtype_policy"):  # tf_keras
        saved = (layer, layer._dtype_policy, layer.__dict__.get("_compute_dtype_object"))
        layer._set_dtype_policy(policy)
        return saved
    from keras.src import dtype_policies

    saved = (layer, layer._dtype_policy, None)
    layer._dtype_policy = dtype_policies.get(policy)
    return saved


def restore_layer_policy(saved: tuple) -> None:
    layer, policy, compute_object = saved
    layer._dtype_policy = policy
    if hasattr(layer, "_set_dtype_policy"):
        layer._compute_dtype_object = compute_object
