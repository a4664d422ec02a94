"""Range audits of the checkpoints a run restores (MP302/MP303), judged per variable by the layer that owns it.

A checkpoint value only becomes inf (or flushes to zero) when the layer that uses it computes in float16, or when
the variable it is restored into is float16: the float32 head `Dense(1, dtype="float32")` that MP401's own fix
creates holds 1e5 in its bias and returns a finite 1e5. So each audited value is traced to its variable (the
object a TF2 restore matched it to, the variable a TF1 Saver restores by name, the layer a Keras weights file names)
and from there to the innermost layer that owns the variable; the audit row records that layer and the dtype it
computes in. A run in which no layer computes in float16 (a model built with `dtype="float32"` under a global mixed
policy) is not audited at all.
"""

from __future__ import annotations

from mpdoctor.facts.dtypes import LOW_PRECISION, dtype_name
from mpdoctor.facts.keras_semantics import layer_policy, sublayers
from mpdoctor.facts.schema import Restore

# Layers that compute nothing themselves: their policy says nothing about the run's compute dtype.
_NOT_COMPUTING = ("InputLayer",)


def computes_in_float16(layers) -> bool:
    """Whether any layer of the run (models excluded: their layers compute) computes in float16."""
    for layer in layers:
        if type(layer).__name__ in _NOT_COMPUTING or hasattr(layer, "fit"):
            continue
        if layer_policy(layer)[1] == "float16":
            return True
    return False


def variable_owners(layers) -> dict[int, object]:
    """id(variable) -> the innermost layer whose weights hold it (the wrapped variable of an AutoCastVariable and the
    tf.Variable inside a Keras 3 Variable are keyed too: checkpoints track either)."""
    owners: dict[int, object] = {}
    weighted = []
    for layer in layers:
        try:
            weighted.append((layer, list(layer.weights)))
        except Exception:
            continue
    for layer, weights in sorted(weighted, key=lambda item: len(item[1])):  # innermost (fewest weights) first
        for variable in weights:
            for key in _variable_ids(variable):
                owners.setdefault(key, layer)
    return owners


def _variable_ids(variable) -> list[int]:
    ids = [id(variable)]
    for attribute in ("_variable", "_value", "value"):
        inner = variable.__dict__.get(attribute) if hasattr(variable, "__dict__") else None
        if inner is not None:
            ids.append(id(inner))
    return ids


class Owners:
    """Which layer (and variable) each checkpoint key of a restore feeds: `resolved` holds id(restore) -> {key:
    variable} for restores that say which object got which value (TF2 object-based, TF1 Saver, hand-written
    restores); `receivers` id(restore) -> the model whose `load_weights` read a Keras weights file."""

    def __init__(self, layers, resolved: dict[int, dict], receivers: dict[int, object]) -> None:
        self.by_variable = variable_owners(layers)
        self.resolved = resolved
        self.receivers = receivers

    def of(self, restore: Restore, keys: list[str]) -> dict[str, tuple[object, object | None]]:
        """{checkpoint key: (owning layer, variable or None)} for the keys that can be told."""
        found = {}
        for key, variable in (self.resolved.get(id(restore)) or {}).items():
            layer = self.owner_of(variable)
            if layer is not None:
                found[key] = (layer, variable)
        if not found:
            named = keys_by_layer_name(self.receivers.get(id(restore)), keys)
            found = {key: (layer, None) for key, layer in named.items()}
        return found

    def owner_of(self, variable):
        for key in _variable_ids(variable):
            if key in self.by_variable:
                return self.by_variable[key]
        return None


def keys_by_layer_name(receiver, keys) -> dict[str, object]:
    """checkpoint key -> layer, for Keras weights files (`layers/dense/vars/0`, `model_weights/dense/dense/kernel:0`):
    the last path component that names a layer of the receiving model."""
    if receiver is None:
        return {}
    try:
        layers = {layer.name: layer for layer in sublayers(receiver, recursive=True)}
    except Exception:
        return {}
    found = {}
    for key in keys:
        named = [part for part in key.split("/") if part in layers]
        if named:
            found[key] = layers[named[-1]]
    return found


def audit_restores(restores: list[Restore], float16_run: bool, owners: Owners, values: dict | None = None) -> None:
    """Range-audit every checkpoint that was (or, with --checkpoint, would be) restored in a run where some layer
    computes in float16, and record per audited variable the layer that owns it and the dtype it is used in.
    `values`: id(restore) -> (format, {key: array}) for hand-written restores, audited on the values the script
    assigned rather than on the whole file."""
    if not float16_run:
        return
    from mpdoctor.artifacts.range_audit import audit_arrays, audit_checkpoint

    for restore in restores:
        if restore.error or not restore.path or restore.audit is not None:
            continue
        try:
            if values and id(restore) in values:
                fmt, arrays = values[id(restore)]
                restore.audit = audit_arrays(restore.path, fmt, arrays, "float16")
            else:
                restore.audit = audit_checkpoint(restore.path, "float16")
        except BaseException as exc:
            restore.audit_error = f"{type(exc).__name__}: {exc}"
            continue
        known = owners.of(restore, [row.key for row in restore.audit.variables])
        for row in restore.audit.variables:
            if row.key in known:
                layer, variable = known[row.key]
                row.layer = getattr(layer, "name", None)
                row.compute_dtype = _used_in(layer, variable)


def _used_in(layer, variable) -> str | None:
    """The dtype the value is used in: float16 when the variable itself is float16 (the restore casts it), else the
    owning layer's compute dtype."""
    variable_dtype = dtype_name(getattr(variable, "dtype", None)) if variable is not None else None
    if variable_dtype in LOW_PRECISION:
        return variable_dtype
    return layer_policy(layer)[1]
