"""The probe of a subclassed model (see mpdoctor.trace.child.graph): a ones sample shaped like the model's known
input, and one call of the model with the `call` of its sublayers wrapped to record the dtypes they see. Also the
instance-level `call` wrapping the numerics and the plan share (`MISSING`, `restore_calls`)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping

from mpdoctor.facts.dtypes import dtype_name as _dt
from mpdoctor.facts.dtypes import is_float as _is_float
from mpdoctor.trace.child.layer_api import LayerApi, flatten, is_keras_tensor, layer_api_of, tensor_shape


def make_sample(api: LayerApi, model, parent: str | None):
    """A ones sample for one call of `model`, or None when no input shape is known."""
    np = sys.modules.get("numpy")
    if np is None:
        return None
    specs = None
    if parent is not None:
        # Nested in a graph: shaped like its first symbolic call.
        for knode in getattr(model, "_inbound_nodes", []) or []:
            args, _ = api.node_args(knode)
            first = args[0] if args else None
            if first is not None:
                specs = _map_structure(
                    lambda t: _Spec(tensor_shape(t), _dt(t.dtype)) if is_keras_tensor(t) else None, first
                )
                break
    if specs is None:
        specs = known_input_spec(api, model)
    if specs is None:
        return None

    def make(spec):
        if not isinstance(spec, _Spec):
            return None
        shape, dtype = spec.shape, spec.dtype
        if shape is None or dtype is None:
            raise _NoSample
        dims = [1 if d is None else int(d) for d in shape]
        try:
            return np.ones(dims, dtype=dtype)
        except TypeError:
            return np.ones(dims, dtype="float32")

    try:
        return _map_structure(make, specs)
    except _NoSample:
        return None


def known_input_spec(api: LayerApi, model):
    """The nest of `_Spec`s of the inputs of a model whose input shape is known (built or called), or None."""
    if api.keras3:
        shapes = getattr(model, "_build_shapes_dict", None)
        if isinstance(shapes, Mapping) and len(shapes) == 1:
            shape = next(iter(shapes.values()))
            return _map_shapes(shape, "float32")
    else:
        spec = getattr(model, "_saved_model_inputs_spec", None)
        if spec is not None:
            # The saved spec holds the inputs after the model's own autocast; feed floats as float32.
            return _map_structure(lambda s: _Spec(tensor_shape(s), _user_dtype(getattr(s, "dtype", None))), spec)
        shape = getattr(model, "_build_input_shape", None)
        if shape is not None:
            return _map_shapes(shape, "float32")
    spec = getattr(model, "input_spec", None)
    if spec is not None and not isinstance(spec, (list, tuple)):
        shape = getattr(spec, "shape", None)
        if shape is not None:
            dims = _as_dims(shape)
            if dims is not None:
                return _Spec(dims, _dt(getattr(spec, "dtype", None)) or "float32")
    return None


def record_calls(targets: list[tuple[str, object]], model, sample) -> tuple[object, dict[str, list]]:
    """Call `model` on `sample` with the `call` of each (node id, layer) of `targets` wrapped on the instance, then
    restored: the model's result, and per node id the (post-autocast input dtypes, output dtypes) of each call."""
    records: dict[str, list] = {node_id: [] for node_id, _ in targets}
    patched = []
    try:
        for node_id, layer in targets:
            original = layer.__dict__.get("call", MISSING)
            bound = layer.call
            object.__setattr__(layer, "call", _recording_call(bound, records[node_id]))
            patched.append((layer, original))
        result = model(sample)
    finally:
        restore_calls(patched)
    return result, records


def known_input_shapes(model) -> list[tuple[list, str]] | None:
    """[(shape with None for unknown dims, dtype)] of the inputs of a subclassed model whose input shape is known
    (the same sources as the probe), or None."""
    try:
        specs = known_input_spec(layer_api_of(model), model)
    except TypeError:  # not a Keras model
        return None
    flat = flatten(specs, []) if specs is not None else []
    if not flat or not all(isinstance(s, _Spec) and s.shape is not None for s in flat):
        return None
    return [(s.shape, s.dtype or "float32") for s in flat]


class _NoSample(Exception):
    pass


MISSING = object()


def restore_calls(patched: list[tuple]) -> None:
    """Undo instance-level `call` wrappers: (layer, the instance's own `call` before, or MISSING)."""
    for layer, original in patched:
        if original is MISSING:
            with contextlib.suppress(AttributeError):
                object.__delattr__(layer, "call")
        else:
            object.__setattr__(layer, "call", original)


def _recording_call(bound, sink):
    def call(*args, **kwargs):
        outputs = bound(*args, **kwargs)
        post = [_dt(x.dtype) for x in flatten((list(args), kwargs), []) if _tensor_like(x)]
        out = [_dt(x.dtype) for x in flatten(outputs, []) if _tensor_like(x)]
        sink.append((post, out))
        return outputs

    return call


def _tensor_like(x) -> bool:
    return hasattr(x, "dtype") and hasattr(x, "shape") and not isinstance(x, (str, bytes, type))


def _map_structure(fn, structure):
    if isinstance(structure, Mapping):
        return {key: _map_structure(fn, value) for key, value in structure.items()}
    if isinstance(structure, list):
        return [_map_structure(fn, item) for item in structure]
    if isinstance(structure, tuple):
        return tuple(_map_structure(fn, item) for item in structure)
    return fn(structure)


class _Spec:
    """Shape and dtype of one sample tensor for a probe."""

    def __init__(self, shape, dtype):
        self.shape = shape
        self.dtype = dtype


def _map_shapes(shape, dtype):
    """A build shape (tuple of ints, or a nest of them) as a nest of (shape, dtype) specs."""
    dims = _as_dims(shape)
    if dims is not None:
        return _Spec(dims, dtype)
    if isinstance(shape, Mapping):
        return {key: _map_shapes(value, dtype) for key, value in shape.items()}
    if isinstance(shape, (list, tuple)):
        return [_map_shapes(value, dtype) for value in shape]
    return None


def _as_dims(shape):
    try:
        dims = list(shape)
    except TypeError:
        return None
    if all(d is None or isinstance(d, int) or hasattr(d, "__index__") for d in dims):
        return [None if d is None else int(d) for d in dims]
    return None


def _user_dtype(dtype) -> str:
    name = _dt(dtype) or "float32"
    return "float32" if _is_float(name) else name
