"""How the trace child's graph builder reads a built Keras layer of either flavour (Keras 3 or tf_keras): the
flavour-dependent accessors of graphs, nodes and layer attributes (`LayerApi`), what kind of node a layer is, and
the small readers of tensors and call signatures. Never imports Keras: classes are recognised by their names and
modules (see mpdoctor.trace.child.graph)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from mpdoctor.facts.dtypes import dtype_name as _dt
from mpdoctor.facts.dtypes import is_float as _is_float
from mpdoctor.facts.keras_semantics import (
    ACTIVATION_LAYERS,
    KERAS3,
    TF_OP_LAYERS,
    autocast_flag,
    flavour_of,
    sublayers,
)


def tensor_shape(tensor):
    try:
        shape = tensor.shape
        dims = list(shape) if shape is not None else None
    except (TypeError, ValueError):
        return None
    if dims is None:
        return None
    return [None if d is None else int(getattr(d, "value", d) if not isinstance(d, int) else d) for d in dims]


def flatten(structure, out):
    """Flatten lists/tuples/dicts (dicts in sorted-key order, like tf.nest and keras.tree)."""
    if isinstance(structure, Mapping):
        try:
            keys = sorted(structure)
        except TypeError:
            keys = list(structure)
        for key in keys:
            flatten(structure[key], out)
    elif isinstance(structure, (list, tuple)):
        for item in structure:
            flatten(item, out)
    else:
        out.append(structure)
    return out


def is_keras_tensor(obj) -> bool:
    return hasattr(obj, "_keras_history") and any(c.__name__ == "KerasTensor" for c in type(obj).__mro__)


def _mro(obj):
    return type(obj).__mro__


def class_names(obj) -> set[str]:
    return {c.__name__ for c in _mro(obj)}


def _keras_module(obj) -> bool:
    module = type(obj).__module__ or ""
    return module.startswith(("keras.", "tf_keras.")) or module in ("keras", "tf_keras")


def _fn_name(fn) -> str | None:
    if fn is None:
        return None
    if isinstance(fn, str):
        return fn
    inner = getattr(fn, "func", None)  # functools.partial
    if inner is not None and not hasattr(fn, "__name__"):
        return _fn_name(inner)
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        layer_name = ACTIVATION_LAYERS.get(type(fn).__name__)
        if layer_name:
            return layer_name
        cls = type(fn).__name__
        name = "".join("_" + ch.lower() if ch.isupper() and i else ch.lower() for i, ch in enumerate(cls))
    return name.removesuffix("_v2").removesuffix("_v1")


class LayerApi:
    """The few flavour-dependent accessors."""

    def __init__(self, flavour: str):
        self.flavour = flavour
        self.keras3 = flavour == KERAS3

    # -- graphs
    def graph_holder(self, model):
        """The object holding the symbolic graph of a model, or None (subclassed / unbuilt)."""
        names = class_names(model)
        if self.keras3:
            if "Functional" in names:
                return model
            if "Sequential" in names:
                return getattr(model, "_functional", None)
            return None
        if getattr(model, "_is_graph_network", False) and getattr(model, "_nodes_by_depth", None) is not None:
            return model
        return None

    def is_model(self, layer) -> bool:
        return "Model" in class_names(layer) and keras_class(layer, "Model")

    def graph_inputs(self, holder):
        return list(holder._inputs) if self.keras3 else list(holder.inputs)

    def graph_outputs(self, holder):
        return list(holder._outputs) if self.keras3 else list(holder.outputs)

    def nodes_in_order(self, holder):
        by_depth = holder._nodes_by_depth
        ordered = []
        for depth in sorted(by_depth, reverse=True):
            ordered.extend(by_depth[depth])
        return ordered

    def node_op(self, node):
        return node.operation if self.keras3 else node.layer

    def node_args(self, node):
        if self.keras3:
            return node.arguments.args, node.arguments.kwargs
        return node.call_args, node.call_kwargs

    def node_outputs(self, node):
        return list(node.outputs) if self.keras3 else flatten(node.outputs, [])

    def sublayers(self, model):
        return sublayers(model, recursive=False)

    # -- attributes
    def autocast(self, layer):
        return autocast_flag(layer)

    def policy(self, layer):
        policy = getattr(layer, "dtype_policy", None) if is_layer(layer) else None
        if policy is None:
            return None
        name = getattr(policy, "name", None)
        return name if isinstance(name, str) else str(policy)

    def compute_dtype(self, layer):
        return _dt(getattr(layer, "compute_dtype", None)) if is_layer(layer) else None

    def variable_dtype(self, layer):
        if not is_layer(layer):
            return None
        value = getattr(layer, "variable_dtype", None)
        if value is None:
            value = getattr(layer, "dtype", None)
        return _dt(value)

    def cast_target(self, layer):
        """The dtype the layer casts floating inputs to, or None when it does not autocast."""
        if not is_layer(layer) or not self.autocast(layer):
            return None
        compute = self.compute_dtype(layer)
        if not _is_float(compute):
            return None
        if self.keras3:
            if not getattr(layer, "_convert_input_args", True):
                return None
            target = _dt(getattr(layer, "input_dtype", compute))
            return target if _is_float(target) else None
        return compute


def layer_api_of(model) -> LayerApi:
    """The accessors of `model`'s flavour; TypeError for an object that is no Keras model."""
    flavour = flavour_of(model)
    if flavour is None:
        raise TypeError(f"not a Keras model: {type(model).__module__}.{type(model).__qualname__}")
    return LayerApi(flavour)


def keras_class(obj, name) -> bool:
    for cls in _mro(obj):
        module = cls.__module__ or ""
        if cls.__name__ == name and (module.startswith(("keras.", "tf_keras.")) or module in ("keras", "tf_keras")):
            return True
    return False


def is_layer(obj) -> bool:
    return keras_class(obj, "Layer")


def layer_kind(api: LayerApi, op) -> str:
    names = class_names(op)
    cls = type(op).__name__
    module = type(op).__module__ or ""
    if "InputLayer" in names and keras_class(op, "InputLayer"):
        return "input"
    if not is_layer(op):
        return "op"
    if api.is_model(op):
        return "model" if api.graph_holder(op) is not None else "subclassed_model"
    if names & TF_OP_LAYERS and keras_class(op, "Layer"):
        return "op"
    if "Lambda" in names and keras_class(op, "Lambda"):
        return "lambda"
    if (cls == "KerasLayer" and module.startswith("tensorflow_hub")) or "TFSMLayer" in names:
        return "savedmodel"
    if not _keras_module(op):
        return "custom"
    if ".preprocessing" in module:
        return "preprocessing"
    return "builtin"


def activation_name(op) -> str | None:
    name = ACTIVATION_LAYERS.get(type(op).__name__)
    if name:
        return name
    try:
        act = op.__dict__.get("activation", None)
        if act is None and "activation" not in op.__dict__:
            act = getattr(op, "activation", None)
    except Exception:
        return None
    if act is None:
        return None
    return _fn_name(act)


def savedmodel_handle(op) -> str | None:
    names = class_names(op)
    if type(op).__name__ == "KerasLayer" and (type(op).__module__ or "").startswith("tensorflow_hub"):
        handle = getattr(op, "_handle", None)
        if handle is None:
            handle = getattr(op, "handle", None)
        return handle if isinstance(handle, str) else (None if handle is None else f"<{type(handle).__name__}>")
    if "TFSMLayer" in names:
        path = getattr(op, "filepath", None)
        return None if path is None else str(path)
    return None


def first_call_param(op):
    try:
        params = [
            p
            for p in inspect.signature(op.call).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        return params[0].name if params else None
    except (TypeError, ValueError):
        return None
