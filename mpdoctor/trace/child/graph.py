"""The dtype graph of an already-built Keras model (Keras 3 or tf_keras), as plain JSON-able data.

`model_graph(model, layer_records)` returns the GRAPH dict of the trace facts: layers are nodes, tensors are edges,
dtypes on both, plus a dtype *prediction* made from the graph and the Keras autocast rules, and the places where
prediction and observation disagree. `to_networkx(graph)` rebuilds a `networkx.MultiDiGraph` (a `DiGraph` that keeps
parallel edges, e.g. one layer feeding two arguments of another) from the dict for rule code.

Runs in the trace child, next to the user's model. It never imports Keras: the flavour is read from the model's
class hierarchy (`keras.*` = Keras 3, `tf_keras.*` = tf_keras) and the few library objects needed are taken from
`sys.modules`, so a Keras 3 model never pulls in tf_keras and vice versa. Importing this module is cheap
(networkx only).

This module builds the graph per model kind (graph models scope by scope, subclassed models as a tree of sublayers
then probed); how a layer is read is layer_api.py's, the dtype prediction dtype_prediction.py's, the probe's sample
and recording probe.py's, and the layer and op classes they know are facts/keras_semantics.py's.

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

import gc
from collections.abc import Mapping

import networkx as nx

from mpdoctor.facts.dtypes import dtype_name as _dt
from mpdoctor.facts.schema import ModelGraph
from mpdoctor.trace.child.dtype_prediction import disagreement, post_cast, predict_outputs
from mpdoctor.trace.child.layer_api import (
    activation_name,
    class_names,
    first_call_param,
    flatten,
    is_keras_tensor,
    is_layer,
    layer_api_of,
    layer_kind,
    savedmodel_handle,
    tensor_shape,
)
from mpdoctor.trace.child.probe import make_sample, record_calls

__all__ = ["model_graph", "to_networkx"]


# --------------------------------------------------------------------------------------------------------------------
# the builder


class _Builder:
    """The graph of one model, scope by scope: a graph model's layers and calls, a subclassed model's sublayers
    and its probe; nested models inside, their layers under the nested model's id."""

    def __init__(self, model, records: Mapping, probe: bool):
        self.model = model
        self.records = records or {}
        self.probe_enabled = probe
        self.api = layer_api_of(model)
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
        kind = layer_kind(api, op)
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
            "autocast": api.autocast(op) if is_layer(op) else False,
            "is_output": False,
            "is_input": False,
            "created_at": record.created_at.to_json() if record is not None and record.created_at else None,
            "savedmodel_handle": savedmodel_handle(op),
            "activation": activation_name(op) if is_layer(op) else None,
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
            kind = "sequential" if "Sequential" in class_names(self.model) else "functional"
            self._graph_scope(self.model, holder, "", None)
            self._top_io(holder)
        else:
            kind = "subclassed" if "Sequential" not in class_names(self.model) else "sequential_unbuilt"
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
            first_param = first_call_param(op)
        result = []
        for position, arg in enumerate(args or ()):
            for item in flatten(arg, []):
                if is_keras_tensor(item):
                    result.append((item, position, None))
        for name, arg in (kwargs or {}).items():
            for item in flatten(arg, []):
                if is_keras_tensor(item):
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
        post = post_cast(self.api, op, kind, inputs, pre)
        for index, (tensor, arg_index, arg_name) in enumerate(inputs):
            source = self._resolve_source(prefix, tensor)
            if source is None:
                continue
            self._edge(source[0], node_id, tensor, arg_index, arg_name, index, source[1], call_index)
        if kind == "input":
            declared = _dt(getattr(op, "dtype", None)) or (observed_out[0] if observed_out else None)
            predicted_out = [declared] * max(1, len(observed_out))
        else:
            predicted_out = predict_outputs(self.api, op, kind, inputs, post, len(observed_out), knode)
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
            "shape": tensor_shape(tensor),
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
            self.graph_inputs.append({"node": node_id, "dtype": _dt(tensor.dtype), "shape": tensor_shape(tensor)})
        for tensor in api.graph_outputs(holder):
            source = self._resolve_source("", tensor)
            node_id = source[0] if source else None
            if node_id is not None:
                self.nodes[node_id]["is_output"] = True
            self.graph_outputs.append(
                {
                    "node": node_id,
                    "dtype": _dt(tensor.dtype),
                    "shape": tensor_shape(tensor),
                    "predicted_dtype": source[2] if source else None,
                    "output_index": source[1] if source else None,
                }
            )

    # -- rules
    def _compare(self, node, kind, post, predicted, observed):
        entry = disagreement(self.api, node, kind, post, predicted, observed)
        if entry is not None:
            (self.unpredictable if "reason" in entry else self.mismatches).append(entry)

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
            sample = make_sample(self.api, model, parent)
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
                        self.graph_inputs.append(
                            {"node": None, "dtype": _dt(tensor.dtype), "shape": tensor_shape(tensor)}
                        )
                    for tensor in flatten(result, []):
                        if hasattr(tensor, "dtype"):
                            self.graph_outputs.append(
                                {
                                    "node": None,
                                    "dtype": _dt(tensor.dtype),
                                    "shape": tensor_shape(tensor),
                                    "predicted_dtype": None,
                                    "output_index": None,
                                }
                            )
        if top:
            self.probe_info = info
        else:
            self.probe_info = self.probe_info or {}
            self.probe_info.setdefault("nested", []).append(info)

    def _run_probe(self, model, prefix, sample):
        targets = self._probed_layers(model, prefix)
        result, records = record_calls(targets, model, sample)
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
                    predicted = predict_outputs(self.api, layer, kind, inputs, post, len(observed_out))
                node["input_dtypes"].extend(post)
                node["predicted_input_dtypes"].extend(post)
                node["output_dtypes"].extend(observed_out)
                node["predicted_output_dtypes"].extend(predicted)
                self._compare(node, kind, post, predicted, observed_out)
        return result


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
