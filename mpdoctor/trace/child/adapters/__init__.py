"""One adapter per Keras line: the private names of each line live in its own module, and the line a package is
gets decided at run time from the package itself (its version and layout), never from its name alone: on TF
2.13-2.15 the `keras` package is Keras 2, on TF >= 2.16 it is Keras 3.

Each adapter module has:
- `LINE`: what it adapts, for messages;
- `PRIVATE_NAMES`: every private module or attribute of Keras it touches (what breaks first on a new release);
- `handles(package) -> bool`: whether the imported package is of its line;
- `install(hooks, package)`: the hooks of mpdoctor.trace.child.hooks.Hooks on that package's APIs;
- `model_class(package)`: the Model base class;
- `set_policy(layer, package, policy)`: give a layer another dtype policy in place, returning the undo (the
  numerics' float32 reference run, MP504's float32 step, `mpdoctor plan`);
- `reset_names(package)`: restart the automatic layer names, so a model built again by the trace is named as the
  user's own build was.
"""

from __future__ import annotations

import types

from mpdoctor.trace.child.adapters import keras2, keras3, tf_keras

ADAPTERS = (keras3, keras2, tf_keras)


class UnsupportedKeras(Exception):
    """The package is a Keras no adapter knows (older than 2.13, or a new major version)."""


def adapter_for(package: types.ModuleType) -> types.ModuleType:
    """The adapter module for an imported Keras package (`keras` or `tf_keras`)."""
    for adapter in ADAPTERS:
        if adapter.handles(package):
            return adapter
    version = getattr(package, "__version__", "of unknown version")
    raise UnsupportedKeras(
        f"no adapter for the {package.__name__} package {version} (supported: Keras 2.13-2.15, tf_keras 2.14+, Keras 3)"
    )
