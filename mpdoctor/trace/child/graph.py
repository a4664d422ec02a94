"""The dtype graph of an already-built Keras model (Keras 3 or tf_keras), as plain JSON-able data.

`model_graph(model, layer_records)` returns the GRAPH dict of the trace facts: layers are nodes, tensors are edges,
dtypes on both, plus a dtype *prediction* made from the graph and the Keras autocast rules, and the places where
prediction and observation disagree. `to_networkx(graph)` rebuilds a `networkx.MultiDiGraph` (a `DiGraph` that keeps
parallel edges, e.g. one layer feeding two arguments of another) from the dict for rule code.

Runs in the trace child, next to the user's model. It never imports Keras: the flavour is read from the model's
class hierarchy (`keras.*` = Keras 3, `tf_keras.*` = tf_keras) and the few library objects needed are taken from
`sys.modules`, so a Keras 3 model never pulls in tf_keras and vice versa. Importing this module is cheap
(networkx only).

What is supported
- Functional and Sequential models (tf_keras Sequential is a graph network; Keras 3 Sequential keeps its graph in
  `_functional`). The top-level model is not a node; its layers are, with ids = layer names. A Sequential also
  gets a node for its (implicit) InputLayer, so its node count is `len(model.layers) + 1`.
- Nested models are subgraphs: a node for the nested model itself (`is_model: true`, no edges) and nodes for its
  layers with qualified ids (`backbone/conv1`, `parent: "backbone"`). Edges into a nested model end at its inner
  input layers, edges out of it start at the inner layer producing that output.
- Keras 3 functional graphs may contain plain operations (`keras.ops.add(x, y)` on symbolic tensors); they are
  nodes of kind "op" (no policy). tf_keras wraps TF ops in `TFOpLambda`-like layers, also kind "op".
- Subclassed models have no layer graph: their tracked sublayers (recursively through nested subclassed models)
  are nodes without edges. Their dtypes are observed by a *probe*: when the model's input shape is known (it was
  built or called: tf_keras `_saved_model_inputs_spec` / `_build_input_shape`, Keras 3 `_build_shapes_dict`,
  else an `input_spec` with a full shape), `call` of each sublayer is wrapped on the instance for one call of the
  model on a ones sample (dtype of the spec, float32 when unknown), then restored. A probe sees the tensors that
  reach `call`, i.e. AFTER autocast, so for probed nodes `input_dtypes` are post-autocast (`observed: "probe"`).
  No known shape (never built, no spec): nodes without dtypes (`observed: null`), `graph["probe"]` says why.
  A subclassed model nested in a functional graph is probed with a sample shaped like its first symbolic call.
  Sublayers of ordinary (non-model) layers are not listed.

Node fields (beyond the facts schema): `uid` (str(id(layer)), the key of facts["layers"]), `kind` (input, model,
subclassed_model, op, lambda, savedmodel, preprocessing, custom, builtin), `is_model`, `module`, `calls` (how many
times the layer is called in this graph), `observed` ("graph" | "probe" | null). Per-node dtype lists concatenate
the layer's calls in graph order (a layer called twice has twice as many entries). Edges: `arg_index` is the
position of the call argument holding the tensor (0 = first argument; a keyword argument counts as 0 when it names
the first parameter of `call`, else -1 with `arg_name`), `input_index` the position in the target's flat input
list (`input_dtypes[input_index]`), `output_index` the position in the source's outputs, `call` the target call.

Observation: the dtype of each symbolic (Keras) tensor: edges carry it, `input_dtypes` of a node are the dtypes of
its incoming tensors BEFORE autocast, `output_dtypes` those of its outputs. Keras 3 infers symbolic dtypes itself:
a layer that overrides `compute_output_shape` only (e.g. Lambda, Concatenate, Dropout) reports its compute dtype
whatever it returns at run time, so a Lambda that casts to float32 shows float16 in a Keras 3 graph; tf_keras runs
`call` on placeholders and reports the real dtype.

Prediction (rules verified on TF 2.21 / keras 3.15 / tf_keras 2.21, in eager and symbolic calls):
1. Autocast, i.e. `predicted_input_dtypes`: a layer whose autocast flag is on (Keras 3 `layer.autocast` and
   `_convert_input_args`; tf_keras `layer._autocast`) and whose compute dtype is floating casts floating inputs
   to its compute dtype (Keras 3: to `layer.input_dtype`). Keras 3 casts every argument, positional and keyword;
   tf_keras only the first argument (with any nesting inside it: `Add()([a, b])` casts both). Integer/bool inputs
   are never cast. Layers built with autocast off do not cast (Keras 3: LayerNormalization, GroupNormalization,
   Embedding; tf_keras: Embedding, TFOpLambda & co, some image preprocessing). Input layers and plain ops do not.
   Nested models (Functional, Sequential) do not autocast but convert each input to the dtype of their inner
   `Input`, so their inner graph runs on its declared input dtypes.
2. Outputs, i.e. `predicted_output_dtypes`: an InputLayer outputs its declared dtype; a nested model the predicted
   dtypes of its inner outputs; every other layer outputs its compute dtype (`Activation("softmax",
   dtype="float32")` gives float32; LayerNormalization with autocast off still returns its compute dtype),
   except that a layer whose inputs are all non-floating passes the dtype of its first input through
   (Reshape/Flatten/Dropout/Concatenate of ints), unless it produces floats (Embedding, CategoryEncoding).
   Keras 3 ops: `ops.cast` gives its dtype, others the promoted dtype of their floating inputs; tf_keras TF-op
   layers: the `tf.DType` among the call arguments (`tf.cast`, `tf.shape(out_type=...)`), else the dtype of the
   first input.
3. Each node is predicted from the observed dtypes of its incoming edges (root-cause isolation: a wrong
   prediction shows up once, at the layer where it happens, not at every layer after it; when every node agrees,
   this equals propagating predictions from the model inputs).

Disagreements: `mismatches` lists nodes whose predicted output dtypes differ from the observed ones and where the
rules above should be exact (built-in Keras layers, input layers, nested models): a non-empty list is a bug in the
rules. `unpredictable` lists the other disagreements with a `reason`: "lambda" (a Lambda returns whatever its
function returns; predicted = compute dtype), "custom" (user-defined layer), "savedmodel" (hub.KerasLayer,
TFSMLayer), "op" (TF/Keras op whose output dtype depends on the op), "preprocessing", "subclassed_model", and
"keras3-symbolic" (a built-in Keras 3 layer whose symbolic dtype is its compute dtype though at run time it passes
non-float inputs through, see Observation).
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import sys
from collections.abc import Mapping

import networkx as nx

from mpdoctor.facts.dtypes import dtype_name as _dt
from mpdoctor.facts.dtypes import is_float as _is_float
from mpdoctor.facts.keras_semantics import (
    ACTIVATION_LAYERS,
    KERAS3,
    autocast_flag,
    autocasts_argument,
    flavour_of,
    sublayers,
)
from mpdoctor.facts.schema import ModelGraph

# Kinds whose prediction must match the observation exactly (else: a `mismatches` entry).
STRICT_KINDS = frozenset({"input", "model", "builtin"})
# Built-in layers that produce floats from integer inputs.
FLOAT_PRODUCERS = frozenset({"Embedding", "CategoryEncoding", "ReversibleEmbedding"})
TF_OP_LAYERS = frozenset(
    {
        "TFOpLambda",
        "SlicingOpLambda",
        "InstanceMethod",
        "InstanceProperty",
        "ClassMethod",
        "TFClassMethodDispatcher",
        "KerasOpDispatcher",
    }
)
DTYPE_KWARGS = ("dtype", "out_type", "output_type", "Tout")
_BOOL_OPS = (
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_not",
    "logical_xor",
    "is_nan",
    "is_inf",
    "is_finite",
    "eq",
    "ne",
)
# Output dtypes of TF ops (tf_keras TFOpLambda symbols, last component) that do not follow their input ...
TF_OP_DTYPES = {
    **{name: "bool" for name in _BOOL_OPS},
    "argmax": "int64",
    "argmin": "int64",
    "shape": "int32",
    "size": "int32",
    "rank": "int32",
}
# ... and of Keras 3 operations (class names).
KERAS3_OP_DTYPES = {
    **{
        name: "bool"
        for name in (
            "Equal",
            "NotEqual",
            "Less",
            "LessEqual",
            "Greater",
            "GreaterEqual",
            "LogicalAnd",
            "LogicalOr",
            "LogicalNot",
            "LogicalXor",
            "IsNan",
            "IsInf",
            "IsFinite",
        )
    },
    "Argmax": "int32",
    "Argmin": "int32",
}
_FLOAT_RANK = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}

__all__ = ["flatten", "known_input_shapes", "model_graph", "to_networkx"]


# --------------------------------------------------------------------------------------------------------------------
# small helpers


def _shape(tensor):
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


def _is_keras_tensor(obj) -> bool:
    return hasattr(obj, "_keras_history") and any(c.__name__ == "KerasTensor" for c in type(obj).__mro__)


def _mro(obj):
    return type(obj).__mro__


def _class_names(obj) -> set[str]:
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


# --------------------------------------------------------------------------------------------------------------------
# layer attributes


class _Api:
    """The few flavour-dependent accessors."""

    def __init__(self, flavour: str):
        self.flavour = flavour
        self.keras3 = flavour == KERAS3

    # -- graphs
    def graph_holder(self, model):
        """The object holding the symbolic graph of a model, or None (subclassed / unbuilt)."""
        names = _class_names(model)
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
        return "Model" in _class_names(layer) and _keras_class(layer, "Model")

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
        policy = getattr(layer, "dtype_policy", None) if _is_layer(layer) else None
        if policy is None:
            return None
        name = getattr(policy, "name", None)
        return name if isinstance(name, str) else str(policy)

    def compute_dtype(self, layer):
        return _dt(getattr(layer, "compute_dtype", None)) if _is_layer(layer) else None

    def variable_dtype(self, layer):
        if not _is_layer(layer):
            return None
        value = getattr(layer, "variable_dtype", None)
        if value is None:
            value = getattr(layer, "dtype", None)
        return _dt(value)

    def cast_target(self, layer):
        """The dtype the layer casts floating inputs to, or None when it does not autocast."""
        if not _is_layer(layer) or not self.autocast(layer):
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


def _keras_class(obj, name) -> bool:
    for cls in _mro(obj):
        module = cls.__module__ or ""
        if cls.__name__ == name and (module.startswith(("keras.", "tf_keras.")) or module in ("keras", "tf_keras")):
            return True
    return False


def _is_layer(obj) -> bool:
    return _keras_class(obj, "Layer")


def _kind(api: _Api, op) -> str:
    names = _class_names(op)
    cls = type(op).__name__
    module = type(op).__module__ or ""
    if "InputLayer" in names and _keras_class(op, "InputLayer"):
        return "input"
    if not _is_layer(op):
        return "op"
    if api.is_model(op):
        return "model" if api.graph_holder(op) is not None else "subclassed_model"
    if names & TF_OP_LAYERS and _keras_class(op, "Layer"):
        return "op"
    if "Lambda" in names and _keras_class(op, "Lambda"):
        return "lambda"
    if (cls == "KerasLayer" and module.startswith("tensorflow_hub")) or "TFSMLayer" in names:
        return "savedmodel"
    if not _keras_module(op):
        return "custom"
    if ".preprocessing" in module:
        return "preprocessing"
    return "builtin"


def _activation(op) -> str | None:
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


def _savedmodel_handle(op) -> str | None:
    names = _class_names(op)
    if type(op).__name__ == "KerasLayer" and (type(op).__module__ or "").startswith("tensorflow_hub"):
        handle = getattr(op, "_handle", None)
        if handle is None:
            handle = getattr(op, "handle", None)
        return handle if isinstance(handle, str) else (None if handle is None else f"<{type(handle).__name__}>")
    if "TFSMLayer" in names:
        path = getattr(op, "filepath", None)
        return None if path is None else str(path)
    return None


# --------------------------------------------------------------------------------------------------------------------
# the builder


class _Builder:
    def __init__(self, model, records: Mapping, probe: bool):
        self.model = model
        self.records = records or {}
        self.probe_enabled = probe
        flavour = flavour_of(model)
        if flavour is None:
            raise TypeError(f"not a Keras model: {type(model).__module__}.{type(model).__qualname__}")
        self.api = _Api(flavour)
        self.nodes: dict[str, dict] = {}
        self.edges: list[dict] = []
        self.mismatches: list[dict] = []
        self.unpredictable: list[dict] = []
        self.node_of: dict[tuple[str, int], str] = {}  # (scope prefix, id(op)) -> node id
        self.scope_of_model: dict[tuple[str, int], str] = {}  # (scope, id(nested model)) -> inner prefix
        self.call_pred: dict[int, list] = {}  # id(keras node) -> predicted output dtypes
        self.probe_info: dict | None = None
        self.graph_inputs: list[dict] = []
        self.graph_outputs: list[dict] = []

    # -- nodes
    def _new_node(self, op, prefix: str, parent: str | None) -> str:
        base = prefix + str(getattr(op, "name", None) or type(op).__name__)
        node_id, n = base, 1
        while node_id in self.nodes:
            n += 1
            node_id = f"{base}#{n}"
        api = self.api
        uid = str(id(op))
        record = self.records.get(uid)
        kind = _kind(api, op)
        explicit = record.explicit_dtype if record is not None else None
        self.nodes[node_id] = {
            "id": node_id,
            "name": str(getattr(op, "name", "") or ""),
            "class": type(op).__name__,
            "module": type(op).__module__,
            "uid": uid,
            "kind": kind,
            "is_model": kind in ("model", "subclassed_model"),
            "policy": api.policy(op),
            "compute_dtype": api.compute_dtype(op),
            "variable_dtype": api.variable_dtype(op),
            "autocast": api.autocast(op) if _is_layer(op) else False,
            "is_output": False,
            "is_input": False,
            "created_at": record.created_at.to_json() if record is not None and record.created_at else None,
            "savedmodel_handle": _savedmodel_handle(op),
            "activation": _activation(op) if _is_layer(op) else None,
            "explicit_dtype": _dt(explicit) if explicit is not None else None,
            "input_dtypes": [],
            "output_dtypes": [],
            "predicted_input_dtypes": [],
            "predicted_output_dtypes": [],
            "parent": parent,
            "calls": 0,
            "observed": None,
        }
        return node_id

    # -- entry
    def build(self) -> dict:
        api = self.api
        holder = api.graph_holder(self.model)
        if holder is not None:
            kind = "sequential" if "Sequential" in _class_names(self.model) else "functional"
            self._graph_scope(self.model, holder, "", None)
            self._top_io(holder)
        else:
            kind = "subclassed" if "Sequential" not in _class_names(self.model) else "sequential_unbuilt"
            self._tree_scope(self.model, "", None)
            self._probe_root(self.model, "", None, top=True)
        return {
            "flavour": api.flavour,
            "model": str(getattr(self.model, "name", "")),
            "model_kind": kind,
            "nodes": list(self.nodes.values()),
            "edges": self.edges,
            "outputs": self.graph_outputs,
            "inputs": self.graph_inputs,
            "mismatches": self.mismatches,
            "unpredictable": self.unpredictable,
            "probe": self.probe_info,
        }

    # -- graph models
    def _graph_scope(self, model, holder, prefix: str, parent: str | None):
        api = self.api
        ordered = api.nodes_in_order(holder)
        # Nodes for the layers, in graph order, then layers that are not called in the graph.
        seen = set()
        layer_order = []
        for knode in ordered:
            op = api.node_op(knode)
            if id(op) not in seen:
                seen.add(id(op))
                layer_order.append(op)
        for op in getattr(model, "layers", []) or []:
            if id(op) not in seen:
                seen.add(id(op))
                layer_order.append(op)
        for op in layer_order:
            node_id = self._new_node(op, prefix, parent)
            self.node_of[(prefix, id(op))] = node_id
            kind = self.nodes[node_id]["kind"]
            if kind == "model":
                inner_prefix = node_id + "/"
                self.scope_of_model[(prefix, id(op))] = inner_prefix
                self._graph_scope(op, api.graph_holder(op), inner_prefix, node_id)
            elif kind == "subclassed_model":
                self._tree_scope(op, node_id + "/", node_id)
        for knode in ordered:
            self._graph_call(knode, prefix)
        # Subclassed models called in this graph: probe them with a sample like their first symbolic call.
        for op in layer_order:
            node_id = self.node_of[(prefix, id(op))]
            if self.nodes[node_id]["kind"] == "subclassed_model":
                self._probe_root(op, node_id + "/", node_id, top=False)

    def _resolve_source(self, prefix: str, tensor):
        """(node id, output index, predicted dtype) of the graph node producing `tensor` in scope `prefix`."""
        history = getattr(tensor, "_keras_history", None)
        if history is None:
            return None
        op, node_index, tensor_index = history[0], history[1], history[2]
        if op is None:
            return None
        inner_prefix = self.scope_of_model.get((prefix, id(op)))
        if inner_prefix is not None:
            holder = self.api.graph_holder(op)
            outputs = self.api.graph_outputs(holder)
            if tensor_index < len(outputs):
                return self._resolve_source(inner_prefix, outputs[tensor_index])
            return None
        node_id = self.node_of.get((prefix, id(op)))
        if node_id is None:
            return None
        predicted = None
        try:
            knode = op._inbound_nodes[node_index]
            preds = self.call_pred.get(id(knode))
            if preds is not None and tensor_index < len(preds):
                predicted = preds[tensor_index]
        except (IndexError, AttributeError):
            pass
        return node_id, tensor_index, predicted

    def _call_inputs(self, op, knode):
        """[(tensor, arg_index, arg_name)] for the Keras tensors of a call, in flat order."""
        args, kwargs = self.api.node_args(knode)
        first_param = None
        if kwargs and not args:
            first_param = _first_call_param(op)
        result = []
        for position, arg in enumerate(args or ()):
            for item in flatten(arg, []):
                if _is_keras_tensor(item):
                    result.append((item, position, None))
        for name, arg in (kwargs or {}).items():
            for item in flatten(arg, []):
                if _is_keras_tensor(item):
                    result.append((item, 0 if name == first_param else -1, name))
        return result

    def _graph_call(self, knode, prefix: str):
        api = self.api
        op = api.node_op(knode)
        node_id = self.node_of[(prefix, id(op))]
        node = self.nodes[node_id]
        kind = node["kind"]
        call_index = node["calls"]
        node["calls"] += 1
        node["observed"] = "graph"
        outputs = api.node_outputs(knode)
        observed_out = [_dt(t.dtype) for t in outputs]
        inputs = self._call_inputs(op, knode) if kind != "input" else []

        if kind == "model":
            self._nested_call(knode, op, node_id, prefix, inputs, observed_out, call_index)
            return

        pre = [_dt(t.dtype) for t, _, _ in inputs]
        post = self._post_cast(op, kind, inputs, pre)
        for index, (tensor, arg_index, arg_name) in enumerate(inputs):
            source = self._resolve_source(prefix, tensor)
            if source is None:
                continue
            self._edge(source[0], node_id, tensor, arg_index, arg_name, index, source[1], call_index)
        if kind == "input":
            declared = _dt(getattr(op, "dtype", None)) or (observed_out[0] if observed_out else None)
            predicted_out = [declared] * max(1, len(observed_out))
        else:
            predicted_out = self._predict_outputs(op, kind, inputs, post, len(observed_out), knode)
        self.call_pred[id(knode)] = predicted_out
        node["input_dtypes"].extend(pre)
        node["predicted_input_dtypes"].extend(post)
        node["output_dtypes"].extend(observed_out)
        node["predicted_output_dtypes"].extend(predicted_out)
        self._compare(node, kind, post, predicted_out, observed_out)

    def _nested_call(self, knode, op, node_id, prefix, inputs, observed_out, call_index):
        """A call of a nested graph model: edges go to its inner input layers; outputs come from its inner graph."""
        api = self.api
        node = self.nodes[node_id]
        inner_prefix = self.scope_of_model[(prefix, id(op))]
        holder = api.graph_holder(op)
        inner_inputs = api.graph_inputs(holder)
        declared = []
        for index, (tensor, arg_index, arg_name) in enumerate(inputs):
            dtype = _dt(tensor.dtype)
            target = None
            if index < len(inner_inputs):
                inner = inner_inputs[index]
                declared.append(_dt(inner.dtype))
                resolved = self._resolve_source(inner_prefix, inner)
                if resolved is not None:
                    target = resolved[0]
            else:
                declared.append(dtype)
            if target is not None:
                target_node = self.nodes[target]
                target_node["input_dtypes"].append(dtype)
                target_node["predicted_input_dtypes"].append(declared[-1])
            source = self._resolve_source(prefix, tensor)
            if source is not None and target is not None:
                self._edge(source[0], target, tensor, arg_index, arg_name, index, source[1], call_index)
        predicted_out = self._inner_outputs(op, inner_prefix, observed_out)
        self.call_pred[id(knode)] = predicted_out
        node["input_dtypes"].extend(_dt(t.dtype) for t, _, _ in inputs)
        node["predicted_input_dtypes"].extend(declared)
        node["output_dtypes"].extend(observed_out)
        node["predicted_output_dtypes"].extend(predicted_out)
        self._compare(node, "model", declared, predicted_out, observed_out)

    def _inner_outputs(self, model, inner_prefix, observed_out):
        """Predicted dtypes of the outputs of a nested graph model (from its inner graph)."""
        predicted = []
        for tensor in self.api.graph_outputs(self.api.graph_holder(model)):
            resolved = self._resolve_source(inner_prefix, tensor)
            predicted.append(resolved[2] if resolved is not None and resolved[2] is not None else _dt(tensor.dtype))
        if len(predicted) != len(observed_out):
            predicted = (predicted + list(observed_out[len(predicted) :]))[: len(observed_out)]
        return predicted

    def _edge(self, source, target, tensor, arg_index, arg_name, input_index, output_index, call_index):
        edge = {
            "source": source,
            "target": target,
            "dtype": _dt(tensor.dtype),
            "shape": _shape(tensor),
            "arg_index": arg_index,
            "input_index": input_index,
            "output_index": output_index,
            "call": call_index,
        }
        if arg_name is not None:
            edge["arg_name"] = arg_name
        self.edges.append(edge)

    def _top_io(self, holder):
        api = self.api
        for tensor in api.graph_inputs(holder):
            source = self._resolve_source("", tensor)
            node_id = source[0] if source else None
            if node_id is not None:
                self.nodes[node_id]["is_input"] = True
            self.graph_inputs.append({"node": node_id, "dtype": _dt(tensor.dtype), "shape": _shape(tensor)})
        for tensor in api.graph_outputs(holder):
            source = self._resolve_source("", tensor)
            node_id = source[0] if source else None
            if node_id is not None:
                self.nodes[node_id]["is_output"] = True
            self.graph_outputs.append(
                {
                    "node": node_id,
                    "dtype": _dt(tensor.dtype),
                    "shape": _shape(tensor),
                    "predicted_dtype": source[2] if source else None,
                    "output_index": source[1] if source else None,
                }
            )

    # -- rules
    def _post_cast(self, op, kind, inputs, pre):
        if kind in ("input", "op", "model"):
            return list(pre)
        target = self.api.cast_target(op)
        if target is None:
            return list(pre)
        keras3 = self.api.keras3
        return [
            target if _is_float(dtype) and autocasts_argument(3 if keras3 else 2, arg_index) else dtype
            for dtype, (_, arg_index, _) in zip(pre, inputs, strict=True)
        ]

    def _predict_outputs(self, op, kind, inputs, post, n_out, knode=None):
        n_out = max(n_out, 1)
        if kind == "op":
            return [self._predict_op(op, post, knode)] * n_out
        compute = self.api.compute_dtype(op)
        if not post or any(_is_float(d) for d in post) or type(op).__name__ in FLOAT_PRODUCERS:
            return [compute] * n_out
        return [post[0]] * n_out  # only non-floating inputs: passed through

    def _predict_op(self, op, post, knode):
        if self.api.keras3:
            if type(op).__name__ == "Cast" and getattr(op, "dtype", None) is not None:
                return _dt(op.dtype)
            known = KERAS3_OP_DTYPES.get(type(op).__name__)
            if known:
                return known
            floats = [d for d in post if _is_float(d)]
            if floats:
                return _promote(floats)
            return post[0] if post else None
        # tf_keras TF-op layer: an explicit dtype among the arguments wins.
        if knode is not None:
            args, kwargs = self.api.node_args(knode)
            for name in DTYPE_KWARGS:
                if name in (kwargs or {}) and kwargs[name] is not None and _looks_like_dtype(kwargs[name]):
                    return _dt(kwargs[name])
            for arg in list(args or ())[1:]:
                if _looks_like_dtype(arg):
                    return _dt(arg)
        symbol = str(getattr(op, "symbol", "") or "").rsplit(".", 1)[-1]
        if symbol in TF_OP_DTYPES:
            return TF_OP_DTYPES[symbol]
        return post[0] if post else None

    def _compare(self, node, kind, post, predicted, observed):
        if predicted == observed:
            return
        entry = {"node": node["id"], "predicted": list(predicted), "observed": list(observed)}
        if kind in STRICT_KINDS:
            compute = node["compute_dtype"]
            if (
                self.api.keras3
                and kind == "builtin"
                and not any(_is_float(d) for d in post)
                and all(d == compute for d in observed)
            ):
                entry["reason"] = "keras3-symbolic"
                self.unpredictable.append(entry)
                return
            self.mismatches.append(entry)
            return
        entry["reason"] = kind
        self.unpredictable.append(entry)

    # -- subclassed models
    def _tree_scope(self, model, prefix: str, parent: str | None):
        api = self.api
        for layer in api.sublayers(model):
            node_id = self._new_node(layer, prefix, parent)
            self.node_of[(prefix, id(layer))] = node_id
            kind = self.nodes[node_id]["kind"]
            if kind == "model":
                inner_prefix = node_id + "/"
                self.scope_of_model[(prefix, id(layer))] = inner_prefix
                self._graph_scope(layer, api.graph_holder(layer), inner_prefix, node_id)
            elif kind == "subclassed_model":
                self._tree_scope(layer, node_id + "/", node_id)

    def _probed_layers(self, model, prefix):
        """(node id, layer) for the layers a probe of `model` observes: its sublayers, through subclassed models."""
        found = []
        for layer in self.api.sublayers(model):
            node_id = self.node_of.get((prefix, id(layer)))
            if node_id is None:
                continue
            found.append((node_id, layer))
            if self.nodes[node_id]["kind"] == "subclassed_model":
                found.extend(self._probed_layers(layer, node_id + "/"))
        return found

    def _probe_root(self, model, prefix, parent, top):
        info = {"model": parent or "", "status": None, "error": None}
        if not self.probe_enabled:
            info["status"] = "disabled"
        else:
            sample = self._sample(model, parent)
            if sample is None:
                info["status"] = "no input spec"
            else:
                info["status"] = "ok"
                try:
                    result = self._run_probe(model, prefix, sample)
                except Exception as error:
                    info["status"] = "error"
                    info["error"] = {"type": type(error).__name__, "message": str(error)[:500]}
                    result = None
                if result is not None and top:
                    for tensor in flatten(sample, []):
                        self.graph_inputs.append({"node": None, "dtype": _dt(tensor.dtype), "shape": _shape(tensor)})
                    for tensor in flatten(result, []):
                        if hasattr(tensor, "dtype"):
                            self.graph_outputs.append(
                                {
                                    "node": None,
                                    "dtype": _dt(tensor.dtype),
                                    "shape": _shape(tensor),
                                    "predicted_dtype": None,
                                    "output_index": None,
                                }
                            )
        if top:
            self.probe_info = info
        else:
            self.probe_info = self.probe_info or {}
            self.probe_info.setdefault("nested", []).append(info)

    def _sample(self, model, parent):
        """A ones sample for one call of `model`, or None when no input shape is known."""
        np = sys.modules.get("numpy")
        if np is None:
            return None
        specs = None
        if parent is not None:
            # Nested in a graph: shaped like its first symbolic call.
            for knode in getattr(model, "_inbound_nodes", []) or []:
                args, _ = self.api.node_args(knode)
                first = args[0] if args else None
                if first is not None:
                    specs = _map_structure(
                        lambda t: _Spec(_shape(t), _dt(t.dtype)) if _is_keras_tensor(t) else None, first
                    )
                    break
        if specs is None:
            specs = self._known_input_spec(model)
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

    def _known_input_spec(self, model):
        if self.api.keras3:
            shapes = getattr(model, "_build_shapes_dict", None)
            if isinstance(shapes, Mapping) and len(shapes) == 1:
                shape = next(iter(shapes.values()))
                return _map_shapes(shape, "float32")
        else:
            spec = getattr(model, "_saved_model_inputs_spec", None)
            if spec is not None:
                # The saved spec holds the inputs after the model's own autocast; feed floats as float32.
                return _map_structure(lambda s: _Spec(_shape(s), _user_dtype(getattr(s, "dtype", None))), spec)
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

    def _run_probe(self, model, prefix, sample):
        targets = self._probed_layers(model, prefix)
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
        for node_id, layer in targets:
            node = self.nodes[node_id]
            kind = node["kind"]
            unique = []
            for call in records[node_id]:
                if call not in unique:
                    unique.append(call)
            if not unique:
                continue
            node["observed"] = node["observed"] or "probe"
            for post, observed_out in unique:
                node["calls"] += 1
                if node["observed"] == "graph":
                    continue  # a nested graph model keeps its symbolic observation
                inputs = [(None, 0, None)] * len(post)
                if kind == "model":
                    predicted = self._inner_outputs(layer, node_id + "/", observed_out)
                elif kind == "input":
                    predicted = list(observed_out)
                else:
                    predicted = self._predict_outputs(layer, kind, inputs, post, len(observed_out))
                node["input_dtypes"].extend(post)
                node["predicted_input_dtypes"].extend(post)
                node["output_dtypes"].extend(observed_out)
                node["predicted_output_dtypes"].extend(predicted)
                self._compare(node, kind, post, predicted, observed_out)
        return result


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


def _looks_like_dtype(value) -> bool:
    return type(value).__name__ == "DType" or (
        isinstance(value, str) and (_is_float(value) or value.startswith(("int", "uint", "bool", "complex")))
    )


def _promote(floats):
    best = floats[0]
    for dtype in floats[1:]:
        if dtype == best:
            continue
        if {dtype, best} == {"float16", "bfloat16"}:
            best = "float32"
        elif _FLOAT_RANK.get(dtype, 0) > _FLOAT_RANK.get(best, 0):
            best = dtype
    return best


def _first_call_param(op):
    try:
        params = [
            p
            for p in inspect.signature(op.call).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        return params[0].name if params else None
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------------------------------------------------
# public API


def model_graph(model, layer_records: Mapping | None = None, probe: bool = True) -> ModelGraph:
    """The graph (see the module docstring and mpdoctor.facts.schema.ModelGraph) of an already-built Keras model.

    `layer_records` maps layer uids (str(id(layer))) to the hooks' LayerRecords; `explicit_dtype` and `created_at`
    are taken from them. `probe=False` never calls the model (subclassed models then have no dtypes).
    """
    enabled = gc.isenabled()
    gc.disable()  # a collection of the garbage left by building a big model would land here and dominate
    try:
        return ModelGraph.from_json(_Builder(model, layer_records or {}, probe).build())
    finally:
        if enabled:
            gc.enable()


def known_input_shapes(model) -> list[tuple[list, str]] | None:
    """[(shape with None for unknown dims, dtype)] of the inputs of a subclassed model whose input shape is known
    (the same sources as the probe), or None."""
    try:
        specs = _Builder(model, {}, False)._known_input_spec(model)
    except TypeError:  # not a Keras model
        return None
    flat = flatten(specs, []) if specs is not None else []
    if not flat or not all(isinstance(s, _Spec) and s.shape is not None for s in flat):
        return None
    return [(s.shape, s.dtype or "float32") for s in flat]


def to_networkx(graph: ModelGraph) -> nx.MultiDiGraph:
    """A networkx MultiDiGraph (layers = nodes, tensors = edges, with their JSON fields as attributes) of a model
    graph.

    Graph attributes: `inputs`, `outputs`, `flavour`, `model`. Parallel edges (one tensor into two arguments, a
    shared layer called twice) are kept; edge keys are the edges' positions in `graph.edges`.
    """
    digraph = nx.MultiDiGraph(
        inputs=[i.to_json() for i in graph.inputs],
        outputs=[o.to_json() for o in graph.outputs],
        flavour=graph.flavour,
        model=graph.model,
    )
    for node in graph.nodes:
        digraph.add_node(node.id, **node.to_json())
    for index, edge in enumerate(graph.edges):
        digraph.add_edge(edge.source, edge.target, key=index, **edge.to_json())
    return digraph
