"""Which Keras lines the trace child hooks, and through which adapter (mpdoctor/trace/child/adapters/: one module
per Keras line, each listing the private names it touches). The line of a package is read from the package itself
at run time: `keras` is Keras 2 on TF 2.13-2.15 and Keras 3 on TF >= 2.16.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Callable

from mpdoctor.facts.dtypes import dtype_name
from mpdoctor.facts.keras_semantics import (
    LEGACY_KERAS_ENV,
    TF_KERAS,
    file_legacy_keras_setting,
    file_turns_on_legacy_keras,
    flavour_of,
    imported_roots,
    legacy_keras_env,
    tf_keras_package,
    version_tuple,
)
from mpdoctor.trace.child import backends
from mpdoctor.trace.child.adapters import adapter_for
from mpdoctor.trace.child.hooks import Hooks

KERAS_PACKAGES = ("keras", "tf_keras")


def flavours(tree: ast.AST, tensorflow_version: str | None = None) -> set[str]:
    """The packages a file may use Keras through ("keras", "tf_keras") and "hub" for tensorflow_hub: the one
    `tf.keras` resolves to here, and those the file imports by name. Only their hooks are installed, so a Keras 3
    file never pays for importing tf_keras and the other way round."""
    if not backends.tensorflow():  # tf_keras and TF Hub are TensorFlow's: a Keras 3 file on JAX or PyTorch
        return {"keras"}
    roots = imported_roots(tree)
    installed = importlib.util.find_spec("tf_keras") is not None
    found = {tf_keras_package(version_tuple(tensorflow_version), legacy_keras_env(), installed)}
    found |= roots & set(KERAS_PACKAGES)
    if "tensorflow_hub" in roots:
        found.add("hub")
    return found


def honour_legacy_request(tree: ast.AST) -> None:
    """A file that sets TF_USE_LEGACY_KERAS gets tf_keras: TensorFlow resolves `tf.keras` on first use, after the
    file set the variable, so the child (which installs its hooks before the file runs) sets it the same way."""
    if file_turns_on_legacy_keras(file_legacy_keras_setting(tree), os.environ):
        os.environ[LEGACY_KERAS_ENV] = "1"


def set_global_policy(policy: str, wanted: set[str]) -> None:
    """Set the global dtype policy of each Keras line in `wanted` (the policy a project's entry point sets before
    it reaches the module traced, or --assume-policy's: another module of the user's program sets it)."""
    if "keras" in wanted:
        import keras

        keras.mixed_precision.set_global_policy(policy)
    if "tf_keras" in wanted:
        import tf_keras

        tf_keras.mixed_precision.set_global_policy(policy)


def install(hooks: Hooks, wanted: set[str]) -> dict[str, str]:
    """Every hook for TensorFlow and the packages in `wanted`, then the re-exported functions replaced. Returns the
    adapter used for each Keras package ({"keras": "Keras 2"}, also kept by the recorder). A wanted package that
    cannot be imported (not installed, or broken here: tensorflow_hub 0.16 without setuptools' pkg_resources) gets
    no hooks: the file's own import of it fails the same way, and that is the file's exception
    (`check_unhooked` tells when the file imported it after all)."""
    if backends.tensorflow():
        hooks.install_tensorflow()
    used = hooks.recorder.adapters  # filled as they are chosen: a failure names the adapter that failed
    for name in KERAS_PACKAGES:
        package = _importable(name, hooks.recorder) if name in wanted else None
        if package is not None:
            adapter = adapter_for(package)
            used[name] = adapter.LINE
            adapter.install(hooks, package)
    if "hub" in wanted:
        hub = _importable("tensorflow_hub", hooks.recorder)
        if hub is not None:
            _install_hub(hooks, hub)
    hooks.patch()
    return used


def _importable(name: str, recorder) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except Exception as exc:
        recorder.unhooked[name] = exc
        return None


def check_unhooked(recorder) -> None:
    """A package that could not be imported to hook it, yet the file ran with it loaded: the run went unrecorded,
    mpdoctor's failure (a package that stayed unimportable failed the file's own import: the file's exception)."""
    for name, exc in recorder.unhooked.items():
        if name in sys.modules:
            recorder.failed("hooks", f"importing {name} to hook it", exc)


def _install_hub(hooks: Hooks, hub: types.ModuleType) -> None:
    hooks.savedmodel_function(hub.load, "hub.load", (0, "handle", "load"))
    hooks.savedmodel_layer(hub.KerasLayer, "hub.KerasLayer", "handle")


def model_classes() -> tuple[type, ...]:
    """The Model base classes of the Keras packages already imported."""
    classes = []
    for name in KERAS_PACKAGES:
        package = sys.modules.get(name)
        if package is not None:
            classes.append(adapter_for(package).model_class(package))
    return tuple(classes)


def reset_layer_names() -> None:
    """Restart the automatic layer names of every Keras line loaded: the trace calls the file's builders after the
    file ran, and without this `model.summary()`'s `dense` would be `dense_1` in the messages (issue 14 item 8)."""
    for name in KERAS_PACKAGES:
        package = sys.modules.get(name)
        if package is not None:
            with contextlib.suppress(Exception):  # a Keras without the counters: names as they come
                adapter_for(package).reset_names(package)


def policy_now() -> str | None:
    """The global dtype policy in force (tf_keras' when both lines are loaded, as before)."""
    policy = None
    for name in KERAS_PACKAGES:
        module = sys.modules.get(name)
        if module is not None:
            with contextlib.suppress(Exception):
                policy = dtype_name(module.mixed_precision.global_policy())
    return policy


# ---------------------------------------------------------------------------------------------- per-layer policies


def set_layer_policy(layer, policy: str) -> Callable[[], None]:
    """Switch one built layer's dtype policy in place (what it computes in from its next call on; its variables stay
    as they are, float32 under every `mixed_*` policy), through its Keras line's adapter (the policy lives in
    private attributes); returns the undo, for `restore_layer_policy`. Used by the numerics' float32 reference run,
    MP504's float32 step and `mpdoctor plan`."""
    package = sys.modules["tf_keras" if flavour_of(layer) == TF_KERAS else "keras"]
    return adapter_for(package).set_policy(layer, package, policy)


def restore_layer_policy(undo: Callable[[], None]) -> None:
    undo()
