"""Read a SavedModel's signatures and concrete-function input specs from disk.

Nothing is executed and TensorFlow is never imported: importing `tensorflow.core.protobuf.saved_model_pb2` runs
`tensorflow/__init__.py` (all of TF, ~2.5 s), so this module declares the subset of the SavedModel schema it reads
(field numbers and types identical to TensorFlow's .proto files; tests compare them with TF's descriptors) in a
private protobuf descriptor pool. Unknown fields (the GraphDef, variables, ...) are skipped by the wire format.
Only the `protobuf` package is needed.

`read_savedmodel(handle)` returns a SavedModelInfo record (mpdoctor.facts.artifacts), whose JSON is:

    {"handle": str, "path": str | None, "error": None | {"kind": "missing" | "offline" | "corrupt" |
     "not_savedmodel", "message": str},
     "tags": ["serve"],                       # tag set of the MetaGraph that was read
     "signatures": [{"name", "method_name", "inputs": [INPUT], "outputs": [INPUT]}],
     "functions": [{"name", "concrete_function", "inputs": [INPUT]}],
     "accepted_input_dtypes": ["float32"],
     "accepted_input_dtypes_by_endpoint": {"__call__": ["float32"], "serving_default": ["float32"]}}
    INPUT = {"name": str, "dtype": "float32" | None, "shape": [None, 4] | None}
            (+ "value": <python value> for a non-tensor argument such as `training=True`,
             + "type_spec": "RaggedTensorSpec" for composite tensors,
             + "spec_name": "feat" for a function input whose TensorSpec name differs from the argument name)

- `signatures`: every SignatureDef except the internal `__saved_model_init_op`, sorted by name; inputs/outputs
  sorted by key. A shape is None when its rank is unknown, a dimension None when unknown (-1).
- `functions`: one entry per concrete function of every function-valued attribute of the root object (what
  `saved_model_cli show --all` lists under "Concrete Functions"), sorted by attribute name then concrete function
  name. `inputs` are the positional arguments (minus `self`), then the keyword arguments, nested structures
  flattened with `arg[0]` / `arg['key']` suffixes.
- `accepted_input_dtypes`: sorted union of the dtype of the FIRST tensor input of (a) every concrete function of
  the root's `__call__` (what `hub.KerasLayer(handle)` and calling a `tf.saved_model.load` object use) and (b) every
  signature (what `TFSMLayer` endpoints and `hub.KerasLayer(signature=...)` use); the first tensor input of a
  signature is its first input in key order. Empty when neither exists (nothing known).
- `accepted_input_dtypes_by_endpoint`: the same per callable name, resolved like `keras.layers.TFSMLayer` and
  `hub.KerasLayer(signature=)` do: a root attribute function first, else the signature of that name.

Handles: a local directory (relative to `base_dir` or the working directory), `file://` URLs, and remote handles
(`https://tfhub.dev/...`, Kaggle, `gs://....tar.gz`), which are looked up in the TF Hub cache exactly where
tensorflow_hub puts them (`$TFHUB_CACHE_DIR` or `<tempdir>/tfhub_modules`, sub-directory `sha1(handle)`); a remote
handle that is not cached gives the error kind "offline" (nothing is ever downloaded).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import tempfile

from mpdoctor.facts import artifacts as records
from mpdoctor.facts.codec import ABSENT

SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
INIT_OP_SIGNATURE = "__saved_model_init_op"

# tensorflow/core/framework/types.proto DataType -> tf.DType.name
DTYPE_NAMES = {
    1: "float32",
    2: "float64",
    3: "int32",
    4: "uint8",
    5: "int16",
    6: "int8",
    7: "string",
    8: "complex64",
    9: "int64",
    10: "bool",
    11: "qint8",
    12: "quint8",
    13: "qint32",
    14: "bfloat16",
    15: "qint16",
    16: "quint16",
    17: "uint16",
    18: "complex128",
    19: "float16",
    20: "resource",
    21: "variant",
    22: "uint32",
    23: "uint64",
    24: "float8_e5m2",
    25: "float8_e4m3fn",
    26: "float8_e4m3fnuz",
    27: "float8_e4m3b11fnuz",
    28: "float8_e5m2fnuz",
    29: "int4",
    30: "uint4",
    31: "int2",
    32: "uint2",
    33: "float4_e2m1fn",
}
# DataType enum value names, needed to parse saved_model.pbtxt (`dtype: DT_FLOAT`).
_DT_ENUM = {
    "DT_INVALID": 0,
    "DT_FLOAT": 1,
    "DT_DOUBLE": 2,
    "DT_INT32": 3,
    "DT_UINT8": 4,
    "DT_INT16": 5,
    "DT_INT8": 6,
    "DT_STRING": 7,
    "DT_COMPLEX64": 8,
    "DT_INT64": 9,
    "DT_BOOL": 10,
    "DT_QINT8": 11,
    "DT_QUINT8": 12,
    "DT_QINT32": 13,
    "DT_BFLOAT16": 14,
    "DT_QINT16": 15,
    "DT_QUINT16": 16,
    "DT_UINT16": 17,
    "DT_COMPLEX128": 18,
    "DT_HALF": 19,
    "DT_RESOURCE": 20,
    "DT_VARIANT": 21,
    "DT_UINT32": 22,
    "DT_UINT64": 23,
    "DT_FLOAT8_E5M2": 24,
    "DT_FLOAT8_E4M3FN": 25,
    "DT_FLOAT8_E4M3FNUZ": 26,
    "DT_FLOAT8_E4M3B11FNUZ": 27,
    "DT_FLOAT8_E5M2FNUZ": 28,
    "DT_INT4": 29,
    "DT_UINT4": 30,
    "DT_INT2": 31,
    "DT_UINT2": 32,
    "DT_FLOAT4_E2M1FN": 33,
}
_DT_ENUM.update({name + "_REF": number + 100 for name, number in list(_DT_ENUM.items()) if number})
_TYPE_SPEC_CLASSES = {
    "UNKNOWN": 0,
    "SPARSE_TENSOR_SPEC": 1,
    "INDEXED_SLICES_SPEC": 2,
    "RAGGED_TENSOR_SPEC": 3,
    "TENSOR_ARRAY_SPEC": 4,
    "DATA_DATASET_SPEC": 5,
    "DATA_ITERATOR_SPEC": 6,
    "OPTIONAL_SPEC": 7,
    "PER_REPLICA_SPEC": 8,
    "VARIABLE_SPEC": 9,
    "ROW_PARTITION_SPEC": 10,
    "REGISTERED_TYPE_SPEC": 12,
    "EXTENSION_TYPE_SPEC": 13,
}
_TYPE_SPEC_CLASS_NAMES = {
    1: "SparseTensorSpec",
    2: "IndexedSlicesSpec",
    3: "RaggedTensorSpec",
    4: "TensorArraySpec",
    5: "DatasetSpec",
    6: "IteratorSpec",
    7: "OptionalSpec",
    8: "PerReplicaSpec",
    9: "VariableSpec",
    10: "RowPartitionSpec",
}

# The subset of saved_model.proto, meta_graph.proto, saved_object_graph.proto, struct.proto and
# tensor_shape.proto that is read. message -> [(number, name, type, label, type_name)]; "map:K:V" declares a map.
_REP, _OPT = "repeated", "optional"
_SCHEMA: dict[str, list[tuple]] = {
    "SavedModel": [
        (1, "saved_model_schema_version", "int64", _OPT, None),
        (2, "meta_graphs", "message", _REP, "MetaGraphDef"),
    ],
    "MetaGraphDef": [
        (1, "meta_info_def", "message", _OPT, "MetaGraphDef.MetaInfoDef"),
        (5, "signature_def", "map", _REP, "SignatureDef"),
        (7, "object_graph_def", "message", _OPT, "SavedObjectGraph"),
    ],
    "MetaGraphDef.MetaInfoDef": [
        (1, "meta_graph_version", "string", _OPT, None),
        (4, "tags", "string", _REP, None),
        (5, "tensorflow_version", "string", _OPT, None),
        (6, "tensorflow_git_version", "string", _OPT, None),
    ],
    "SignatureDef": [
        (1, "inputs", "map", _REP, "TensorInfo"),
        (2, "outputs", "map", _REP, "TensorInfo"),
        (3, "method_name", "string", _OPT, None),
    ],
    "TensorInfo": [
        (1, "name", "string", _OPT, None),
        (2, "dtype", "enum", _OPT, "DataType"),
        (3, "tensor_shape", "message", _OPT, "TensorShapeProto"),
    ],
    "TensorShapeProto": [(2, "dim", "message", _REP, "TensorShapeProto.Dim"), (3, "unknown_rank", "bool", _OPT, None)],
    "TensorShapeProto.Dim": [(1, "size", "int64", _OPT, None), (2, "name", "string", _OPT, None)],
    "SavedObjectGraph": [
        (1, "nodes", "message", _REP, "SavedObject"),
        (2, "concrete_functions", "map", _REP, "SavedConcreteFunction"),
    ],
    "SavedObject": [
        (1, "children", "message", _REP, "ObjectReference"),
        (6, "function", "message", "oneof", "SavedFunction"),
        (8, "bare_concrete_function", "message", "oneof", "SavedBareConcreteFunction"),
    ],
    # tensorflow.TrackableObjectGraph.TrackableObject.ObjectReference
    "ObjectReference": [(1, "node_id", "int32", _OPT, None), (2, "local_name", "string", _OPT, None)],
    "SavedFunction": [
        (1, "concrete_functions", "string", _REP, None),
        (2, "function_spec", "message", _OPT, "FunctionSpec"),
    ],
    "SavedBareConcreteFunction": [
        (1, "concrete_function_name", "string", _OPT, None),
        (2, "argument_keywords", "string", _REP, None),
        (3, "allowed_positional_arguments", "int64", _OPT, None),
        (4, "function_spec", "message", _OPT, "FunctionSpec"),
    ],
    "FunctionSpec": [
        (1, "fullargspec", "message", _OPT, "StructuredValue"),
        (2, "is_method", "bool", _OPT, None),
        (5, "input_signature", "message", _OPT, "StructuredValue"),
    ],
    "SavedConcreteFunction": [
        (2, "bound_inputs", "int32", _REP, None),
        (3, "canonicalized_input_signature", "message", _OPT, "StructuredValue"),
        (4, "output_signature", "message", _OPT, "StructuredValue"),
    ],
    "StructuredValue": [
        (1, "none_value", "message", "oneof", "NoneValue"),
        (11, "float64_value", "double", "oneof", None),
        (12, "int64_value", "sint64", "oneof", None),
        (13, "string_value", "string", "oneof", None),
        (14, "bool_value", "bool", "oneof", None),
        (31, "tensor_shape_value", "message", "oneof", "TensorShapeProto"),
        (32, "tensor_dtype_value", "enum", "oneof", "DataType"),
        (33, "tensor_spec_value", "message", "oneof", "TensorSpecProto"),
        (34, "type_spec_value", "message", "oneof", "TypeSpecProto"),
        (35, "bounded_tensor_spec_value", "message", "oneof", "BoundedTensorSpecProto"),
        (51, "list_value", "message", "oneof", "ListValue"),
        (52, "tuple_value", "message", "oneof", "TupleValue"),
        (53, "dict_value", "message", "oneof", "DictValue"),
        (54, "named_tuple_value", "message", "oneof", "NamedTupleValue"),
    ],
    "NoneValue": [],
    "ListValue": [(1, "values", "message", _REP, "StructuredValue")],
    "TupleValue": [(1, "values", "message", _REP, "StructuredValue")],
    "DictValue": [(1, "fields", "map", _REP, "StructuredValue")],
    "PairValue": [(1, "key", "string", _OPT, None), (2, "value", "message", _OPT, "StructuredValue")],
    "NamedTupleValue": [(1, "name", "string", _OPT, None), (2, "values", "message", _REP, "PairValue")],
    "TensorSpecProto": [
        (1, "name", "string", _OPT, None),
        (2, "shape", "message", _OPT, "TensorShapeProto"),
        (3, "dtype", "enum", _OPT, "DataType"),
    ],
    "BoundedTensorSpecProto": [
        (1, "name", "string", _OPT, None),
        (2, "shape", "message", _OPT, "TensorShapeProto"),
        (3, "dtype", "enum", _OPT, "DataType"),
    ],
    "TypeSpecProto": [
        (1, "type_spec_class", "enum", _OPT, "TypeSpecProto.TypeSpecClass"),
        (2, "type_state", "message", _OPT, "StructuredValue"),
        (3, "type_spec_class_name", "string", _OPT, None),
        (4, "num_flat_components", "int32", _OPT, None),
    ],
}
_ENUMS = {"DataType": _DT_ENUM, "TypeSpecProto.TypeSpecClass": _TYPE_SPEC_CLASSES}
_PACKAGE = "tensorflow"  # same full names as TF's own messages, but in a private descriptor pool


class SavedModelError(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


@functools.lru_cache(maxsize=1)
def _message_classes() -> dict:
    """Build the schema subset in a private DescriptorPool; returns {"SavedModel": class, ...}."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError as exc:  # pragma: no cover - protobuf ships with TensorFlow
        raise ImportError("reading a SavedModel needs the `protobuf` package (pip install protobuf)") from exc

    F = descriptor_pb2.FieldDescriptorProto
    scalar = {
        "int64": F.TYPE_INT64,
        "int32": F.TYPE_INT32,
        "sint64": F.TYPE_SINT64,
        "string": F.TYPE_STRING,
        "bool": F.TYPE_BOOL,
        "double": F.TYPE_DOUBLE,
    }
    file_proto = descriptor_pb2.FileDescriptorProto(
        name="mpdoctor/savedmodel_subset.proto", package=_PACKAGE, syntax="proto3"
    )
    messages: dict[str, object] = {}

    def message(path: str):
        if path not in messages:
            outer, _, inner = path.rpartition(".")
            parent = message(outer).nested_type if outer else file_proto.message_type
            messages[path] = parent.add(name=inner)
        return messages[path]

    def enum(path: str, values: dict):
        outer, _, inner = path.rpartition(".")
        parent = message(outer).enum_type if outer else file_proto.enum_type
        proto = parent.add(name=inner)
        for name, number in sorted(values.items(), key=lambda item: item[1]):
            proto.value.add(name=name, number=number)

    for path, values in _ENUMS.items():
        enum(path, values)
    for path, fields in _SCHEMA.items():
        proto = message(path)
        for number, name, kind, label, type_name in fields:
            field = proto.field.add(name=name, number=number)
            field.label = F.LABEL_REPEATED if label == _REP else F.LABEL_OPTIONAL
            if label == "oneof":
                if not proto.oneof_decl:
                    proto.oneof_decl.add(name="kind")
                field.oneof_index = 0
            if kind == "map":
                entry_name = "".join(part.capitalize() for part in name.split("_")) + "Entry"
                entry = proto.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
                entry.field.add(
                    name="value",
                    number=2,
                    type=F.TYPE_MESSAGE,
                    label=F.LABEL_OPTIONAL,
                    type_name=f".{_PACKAGE}.{type_name}",
                )
                field.type = F.TYPE_MESSAGE
                field.type_name = f".{_PACKAGE}.{path}.{entry_name}"
            elif kind == "message":
                field.type, field.type_name = F.TYPE_MESSAGE, f".{_PACKAGE}.{type_name}"
            elif kind == "enum":
                field.type, field.type_name = F.TYPE_ENUM, f".{_PACKAGE}.{type_name}"
            else:
                field.type = scalar[kind]
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)

    def get_class(descriptor):
        if hasattr(message_factory, "GetMessageClass"):
            return message_factory.GetMessageClass(descriptor)
        return message_factory.MessageFactory(pool).GetPrototype(descriptor)  # protobuf < 4.21

    return {path: get_class(pool.FindMessageTypeByName(f"{_PACKAGE}.{path}")) for path in _SCHEMA}


# ---------------------------------------------------------------------------------------------- handle resolution


def tfhub_cache_dir() -> str:
    """Where tensorflow_hub caches downloaded models (tensorflow_hub/resolver.py: tfhub_cache_dir(use_temp=True))."""
    return os.environ.get("TFHUB_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "tfhub_modules")


def hub_cache_path(handle: str) -> str:
    """tensorflow_hub/compressed_module_resolver.py: _module_dir(handle) = <cache>/sha1(handle)."""
    return os.path.join(tfhub_cache_dir(), hashlib.sha1(handle.encode("utf8")).hexdigest())


def resolve_handle(handle: str, base_dir: str | None = None) -> str:
    """The local directory a handle refers to; raises SavedModelError("missing" | "offline")."""
    lowered = handle.lower()
    if lowered.startswith("file://"):
        from urllib.parse import unquote

        path = unquote(handle[len("file://") :])
        if path.lower().startswith("localhost/"):
            path = path[len("localhost") :]
    elif lowered.startswith(("http://", "https://")) or (
        lowered.startswith("gs://") and lowered.endswith((".tar", ".tar.gz", ".tgz"))
    ):
        cached = hub_cache_path(handle)
        if os.path.isdir(cached) and os.listdir(cached):
            return cached
        raise SavedModelError(
            "offline",
            f"{handle} is not in the TF Hub cache ({cached}) and mpdoctor never downloads",
        )
    elif "://" in handle:
        raise SavedModelError("offline", f"{handle} is a remote path that mpdoctor does not read")
    else:
        path = handle
    if not os.path.isabs(path) and base_dir:
        path = os.path.join(base_dir, path)
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise SavedModelError("missing", f"{path} does not exist")
    return path


# ----------------------------------------------------------------------------------------------------- parsing


def _dtype(number: int) -> str | None:
    if number in DTYPE_NAMES:
        return DTYPE_NAMES[number]
    if number - 100 in DTYPE_NAMES:
        return DTYPE_NAMES[number - 100] + "_ref"
    return None


def _shape(proto) -> list | None:
    if proto.unknown_rank:
        return None
    return [None if dim.size < 0 else int(dim.size) for dim in proto.dim]


def _tensor_info(name: str, info) -> records.TensorInfo:
    return records.TensorInfo(
        name, _dtype(info.dtype), _shape(info.tensor_shape) if info.HasField("tensor_shape") else None
    )


def _python_value(value):
    """A StructuredValue that is not a tensor spec, as plain JSON-able Python."""
    kind = value.WhichOneof("kind")
    if kind in (None, "none_value"):
        return None
    if kind in ("float64_value", "int64_value", "string_value", "bool_value"):
        return getattr(value, kind)
    if kind == "tensor_dtype_value":
        return _dtype(value.tensor_dtype_value)
    if kind == "tensor_shape_value":
        return _shape(value.tensor_shape_value)
    if kind in ("list_value", "tuple_value"):
        return [_python_value(item) for item in getattr(value, kind).values]
    if kind == "dict_value":
        return {key: _python_value(item) for key, item in sorted(value.dict_value.fields.items())}
    if kind == "named_tuple_value":
        return {pair.key: _python_value(pair.value) for pair in value.named_tuple_value.values}
    return None  # a TensorSpec as a Python value: does not happen in arg specs


def _flatten(value, name: str, out: list) -> None:
    """Leaves of a StructuredValue input signature as TensorInfo records, in tf.nest order (dict keys sorted)."""
    kind = value.WhichOneof("kind")
    if kind in ("tensor_spec_value", "bounded_tensor_spec_value"):
        spec = getattr(value, kind)
        item = records.TensorInfo(name, _dtype(spec.dtype), _shape(spec.shape) if spec.HasField("shape") else None)
        if spec.name and spec.name != name:
            item.spec_name = spec.name  # the TensorSpec's own name, what saved_model_cli prints
        out.append(item)
    elif kind == "type_spec_value":
        spec = value.type_spec_value
        dtype, shape = None, None
        state = spec.type_state
        items = list(state.tuple_value.values) if state.WhichOneof("kind") == "tuple_value" else [state]
        for item in items:  # (shape, dtype, ...) for Ragged/Sparse/Variable specs
            item_kind = item.WhichOneof("kind")
            if item_kind == "tensor_dtype_value" and dtype is None:
                dtype = _dtype(item.tensor_dtype_value)
            elif item_kind == "tensor_shape_value" and shape is None:
                shape = _shape(item.tensor_shape_value)
        class_name = spec.type_spec_class_name or _TYPE_SPEC_CLASS_NAMES.get(spec.type_spec_class, "TypeSpec")
        out.append(records.TensorInfo(name, dtype, shape, type_spec=class_name))
    elif kind in ("list_value", "tuple_value"):
        for index, item in enumerate(getattr(value, kind).values):
            _flatten(item, f"{name}[{index}]", out)
    elif kind == "dict_value":
        for key, item in sorted(value.dict_value.fields.items()):
            _flatten(item, f"{name}[{key!r}]", out)
    elif kind == "named_tuple_value":
        for pair in value.named_tuple_value.values:
            _flatten(pair.value, f"{name}.{pair.key}", out)
    else:
        out.append(records.TensorInfo(name, None, None, value=_python_value(value)))


def _argument_names(function_spec, argument_keywords=()) -> list[str]:
    names: list[str] = []
    if function_spec is not None and function_spec.HasField("fullargspec"):
        spec = _python_value(function_spec.fullargspec)
        if isinstance(spec, dict) and isinstance(spec.get("args"), list):
            names = [str(arg) for arg in spec["args"]]
            if function_spec.is_method and names:
                names = names[1:]
    return names or list(argument_keywords)


def _function_inputs(concrete, argument_names: list[str]) -> list[records.TensorInfo]:
    inputs: list[records.TensorInfo] = []
    if not concrete.HasField("canonicalized_input_signature"):
        return inputs
    signature = concrete.canonicalized_input_signature
    if signature.WhichOneof("kind") == "tuple_value" and len(signature.tuple_value.values) == 2:
        args, kwargs = signature.tuple_value.values
    else:  # not the usual (args, kwargs) pair
        args, kwargs = signature, None
    args_kind = args.WhichOneof("kind")
    positional = list(getattr(args, args_kind).values) if args_kind in ("tuple_value", "list_value") else [args]
    for index, value in enumerate(positional):
        _flatten(value, argument_names[index] if index < len(argument_names) else f"arg{index}", inputs)
    if kwargs is not None and kwargs.WhichOneof("kind") == "dict_value":
        for key, value in sorted(kwargs.dict_value.fields.items()):
            _flatten(value, key, inputs)
    return inputs


def _first_tensor_dtype(inputs: list[records.TensorInfo]) -> str | None:
    for item in inputs:
        if item.dtype is not None and item.value is ABSENT:
            return item.dtype
    return None


def _choose_meta_graph(saved_model):
    graphs = list(saved_model.meta_graphs)
    for wanted in (lambda tags: tags == {"serve"}, lambda tags: "serve" in tags, lambda tags: True):
        for graph in graphs:
            if wanted(set(graph.meta_info_def.tags)):
                return graph
    return None


def parse_saved_model(data: bytes, text: bool = False):
    classes = _message_classes()
    saved_model = classes["SavedModel"]()
    if text:
        from google.protobuf import text_format

        text_format.Parse(data.decode("utf-8"), saved_model, allow_unknown_field=True)
    else:
        saved_model.ParseFromString(data)
    return saved_model


def describe_meta_graph(meta_graph) -> records.SavedModelInfo:
    """The signatures, concrete functions and accepted input dtypes of a MetaGraph (no handle, no path)."""
    signatures = []
    for name, signature in sorted(meta_graph.signature_def.items()):
        if name == INIT_OP_SIGNATURE:
            continue
        signatures.append(
            records.SignatureInfo(
                name,
                signature.method_name,
                [_tensor_info(key, info) for key, info in sorted(signature.inputs.items())],
                [_tensor_info(key, info) for key, info in sorted(signature.outputs.items())],
            )
        )

    functions = []
    graph = meta_graph.object_graph_def
    if graph.nodes:
        for child in sorted(graph.nodes[0].children, key=lambda ref: ref.local_name):
            if not 0 <= child.node_id < len(graph.nodes):
                continue
            node = graph.nodes[child.node_id]
            kind = node.WhichOneof("kind")
            if kind == "function":
                spec = node.function.function_spec if node.function.HasField("function_spec") else None
                names = _argument_names(spec)
                concrete_names = sorted(node.function.concrete_functions)
            elif kind == "bare_concrete_function":
                bare = node.bare_concrete_function
                spec = bare.function_spec if bare.HasField("function_spec") else None
                names = _argument_names(spec, bare.argument_keywords)
                concrete_names = [bare.concrete_function_name]
            else:
                continue
            for concrete_name in concrete_names:
                concrete = graph.concrete_functions.get(concrete_name)
                inputs = _function_inputs(concrete, names) if concrete is not None else []
                functions.append(records.FunctionInfo(child.local_name, concrete_name, inputs))

    by_endpoint: dict[str, set] = {}
    for function in functions:
        dtype = _first_tensor_dtype(function.inputs)
        by_endpoint.setdefault(function.name, set()).update([dtype] if dtype else [])
    for signature in signatures:
        if signature.name not in by_endpoint:  # an attribute of that name wins (TFSMLayer, hub.KerasLayer)
            dtype = _first_tensor_dtype(signature.inputs)
            by_endpoint[signature.name] = {dtype} if dtype else set()
    accepted = set(by_endpoint.get("__call__", set()))
    for signature in signatures:
        dtype = _first_tensor_dtype(signature.inputs)
        if dtype:
            accepted.add(dtype)
    return records.SavedModelInfo(
        tags=sorted(meta_graph.meta_info_def.tags),
        signatures=signatures,
        functions=functions,
        accepted_input_dtypes=sorted(accepted),
        accepted_input_dtypes_by_endpoint={name: sorted(dtypes) for name, dtypes in sorted(by_endpoint.items())},
    )


def read_savedmodel(handle: str, base_dir: str | None = None) -> records.SavedModelInfo:
    """What a handle's SavedModel accepts; never raises for a bad handle or file (the problem goes into `error`)."""
    path = None
    try:
        path = resolve_handle(str(handle), base_dir)
        info = describe_meta_graph(_load_meta_graph(path))
    except SavedModelError as exc:
        return records.SavedModelInfo(handle, path, error=records.SavedModelError(exc.kind, exc.message))
    return dataclasses.replace(info, handle=handle, path=path)


def _load_meta_graph(path: str):
    if not os.path.isdir(path):
        raise SavedModelError("not_savedmodel", f"{path} is a file, not a SavedModel directory")
    for filename in SAVED_MODEL_FILES:
        file_path = os.path.join(path, filename)
        if os.path.isfile(file_path):
            break
    else:
        raise SavedModelError("not_savedmodel", f"{path} has no saved_model.pb or saved_model.pbtxt")
    try:
        with open(file_path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise SavedModelError("corrupt", f"{file_path} cannot be read: {exc.strerror or exc}") from None
    try:
        saved_model = parse_saved_model(data, text=filename.endswith(".pbtxt"))
    except ImportError:
        raise
    except Exception as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise SavedModelError("corrupt", f"{file_path} cannot be parsed as a SavedModel: {reason}") from None
    meta_graph = _choose_meta_graph(saved_model)
    if meta_graph is None:
        raise SavedModelError("corrupt", f"{file_path} contains no MetaGraph")
    return meta_graph
