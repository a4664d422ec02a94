"""read_savedmodel: signatures and concrete-function input specs straight from saved_model.pb, without TensorFlow.

The TensorFlow-built SavedModels come from one subprocess (BUILD_SCRIPT) that also records the ground truth the
way `saved_model_cli show --all` gets it (load the model, list each root function's concrete functions) and checks
the reader's protobuf schema subset against TensorFlow's own descriptors. The test process never imports TF.
"""

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from mpdoctor.artifacts.savedmodel import (
    _message_classes,
    hub_cache_path,
    read_savedmodel,
)


def requires_tf(test):
    """Builds a SavedModel with tf_keras: the `tensorflow` fixture marks it `tf`."""
    needs_tf_keras = pytest.mark.skipif(importlib.util.find_spec("tf_keras") is None, reason="needs tf_keras")
    return pytest.mark.usefixtures("tensorflow")(needs_tf_keras(test))


BUILD_SCRIPT = textwrap.dedent(r"""
    import json, os, sys
    out = sys.argv[1]
    import tensorflow as tf
    import keras
    import tf_keras
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    class Float32Only(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.ones([4, 3]))

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            return tf.matmul(x, self.w)

    class TwoDtypes(tf.Module):
        @tf.function
        def __call__(self, x, training=False):
            return x * tf.cast(2.0, x.dtype)

    class Nested(tf.Module):
        @tf.function(input_signature=[{"ids": tf.TensorSpec([None], tf.int32),
                                       "feat": tf.TensorSpec([2, 3], tf.bfloat16)},
                                      tf.RaggedTensorSpec([None, None], tf.float16)])
        def __call__(self, features, tokens):
            return tf.cast(features["feat"], tf.float32)

    tf.saved_model.save(Float32Only(), f"{out}/module_f32")
    two = TwoDtypes()
    two.__call__.get_concrete_function(tf.TensorSpec([None, 4], tf.float32))
    two.__call__.get_concrete_function(tf.TensorSpec([None, 4], tf.float16), training=True)
    tf.saved_model.save(two, f"{out}/module_two")
    tf.saved_model.save(Nested(), f"{out}/module_nested")

    inputs = keras.Input((4,), name="feat")
    keras.Model(inputs, keras.layers.Dense(2)(inputs)).export(f"{out}/keras3_export", verbose=False)
    legacy_inputs = tf_keras.Input((4,), name="feat")
    tf_keras.Model(legacy_inputs, tf_keras.layers.Dense(2, name="d")(legacy_inputs)).save(f"{out}/tf_keras_save")

    os.makedirs(f"{out}/module_f32_pbtxt")
    proto = saved_model_pb2.SavedModel()
    with open(f"{out}/module_f32/saved_model.pb", "rb") as handle:
        proto.ParseFromString(handle.read())
    with open(f"{out}/module_f32_pbtxt/saved_model.pbtxt", "w") as handle:
        handle.write(text_format.MessageToString(proto))

    # Ground truth, as saved_model_cli gets it: load, then each root function's concrete functions.
    def dtypes(structure):
        return [spec.dtype.name if hasattr(spec, "dtype") else None
                for spec in tf.nest.flatten(structure, expand_composites=False)]

    truth = {}
    for name in ("module_f32", "module_two", "module_nested", "keras3_export", "tf_keras_save"):
        loaded = tf.saved_model.load(f"{out}/{name}")
        functions = {}
        for attribute in ("__call__", "serve", "call_and_return_all_conditional_losses", "_default_save_signature"):
            function = getattr(loaded, attribute, None)
            if function is not None and hasattr(function, "concrete_functions"):
                functions[attribute] = sorted(
                    [dtypes(c.structured_input_signature) for c in function.concrete_functions],
                    key=lambda d: [str(x) for x in d])
        signatures = {}
        for key, function in loaded.signatures.items():
            signatures[key] = {
                "inputs": {k: [s.dtype.name, s.shape.as_list()]
                           for k, s in function.structured_input_signature[1].items()},
                "outputs": {k: [s.dtype.name, s.shape.as_list()] for k, s in function.structured_outputs.items()}}
        truth[name] = {"functions": functions, "signatures": signatures}

    # The reader's schema subset against TensorFlow's descriptors.
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import meta_graph_pb2, saved_object_graph_pb2, struct_pb2, trackable_object_graph_pb2
    from mpdoctor.artifacts import savedmodel
    tf_messages = {}
    for module in (saved_model_pb2, meta_graph_pb2, saved_object_graph_pb2, struct_pb2, trackable_object_graph_pb2):
        stack = list(module.DESCRIPTOR.message_types_by_name.values())
        while stack:
            descriptor = stack.pop()
            tf_messages[descriptor.full_name] = descriptor
            stack.extend(descriptor.nested_types)
    from tensorflow.core.framework import tensor_shape_pb2
    for descriptor in (tensor_shape_pb2.TensorShapeProto.DESCRIPTOR, tensor_shape_pb2.TensorShapeProto.Dim.DESCRIPTOR):
        tf_messages[descriptor.full_name] = descriptor
    aliases = {"tensorflow.ObjectReference": "tensorflow.TrackableObjectGraph.TrackableObject.ObjectReference"}
    problems = []
    for path, cls in savedmodel._message_classes().items():
        mine = cls.DESCRIPTOR
        theirs = tf_messages.get(aliases.get(mine.full_name, mine.full_name))
        if theirs is None:
            problems.append(f"{mine.full_name}: not in TensorFlow")
            continue
        for field in mine.fields:
            other = theirs.fields_by_number.get(field.number)
            def kind(f):
                sub = f.message_type or f.enum_type
                return (f.name, f.type, f.is_repeated if hasattr(f, "is_repeated") else f.label == 3,
                        sub.full_name.split(".")[-1] if sub else None)
            if other is None or kind(field) != kind(other):
                problems.append(f"{mine.full_name}.{field.name}: {kind(field)} != {other and kind(other)}")
    for name, number in savedmodel._DT_ENUM.items():
        if types_pb2.DataType.Value(name) != number:
            problems.append(f"DataType {name}")
    for number, name in savedmodel.DTYPE_NAMES.items():
        try:
            if tf.as_dtype(number).name != name:
                problems.append(f"dtype {number}: {tf.as_dtype(number).name} != {name}")
        except TypeError:
            pass  # a DataType this TF has no Python DType for
    truth["schema_problems"] = problems
    with open(f"{out}/truth.json", "w") as handle:
        json.dump(truth, handle)
""")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("savedmodels")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_USE_LEGACY_KERAS", None)
    result = subprocess.run(
        [sys.executable, "-c", BUILD_SCRIPT, str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return out, json.loads((out / "truth.json").read_text())


def _no_error(info):
    """The record as JSON (what `mpdoctor inspect --format json` prints), after checking that it has no error."""
    assert info.error is None, info.error
    return info.to_json()


def _function_dtypes(info, name):
    """Per concrete function of a root attribute, the flat input dtypes (None for Python values)."""
    return sorted(
        [[item["dtype"] for item in function["inputs"]] for function in info["functions"] if function["name"] == name],
        key=lambda d: [str(x) for x in d],
    )


@requires_tf
def test_schema_subset_matches_tensorflow(built):
    assert built[1]["schema_problems"] == []


@requires_tf
@pytest.mark.parametrize("name", ["module_f32", "module_two", "module_nested", "keras3_export", "tf_keras_save"])
def test_matches_what_tensorflow_loads(built, name):
    out, truth = built
    info = _no_error(read_savedmodel(str(out / name)))
    expected = truth[name]
    for function_name, concrete in expected["functions"].items():
        assert _function_dtypes(info, function_name) == concrete, function_name
    signatures = {signature["name"]: signature for signature in info["signatures"]}
    assert set(signatures) == set(expected["signatures"])
    for key, spec in expected["signatures"].items():
        assert {i["name"]: [i["dtype"], i["shape"]] for i in signatures[key]["inputs"]} == spec["inputs"]
        assert {o["name"]: [o["dtype"], o["shape"]] for o in signatures[key]["outputs"]} == spec["outputs"]


@requires_tf
def test_float32_only_module(built):
    info = _no_error(read_savedmodel(str(built[0] / "module_f32")))
    assert info["path"] == str(built[0] / "module_f32")
    assert info["tags"] == ["serve"]
    assert info["signatures"] == [
        {
            "name": "serving_default",
            "method_name": "tensorflow/serving/predict",
            "inputs": [{"name": "x", "dtype": "float32", "shape": [None, 4]}],
            "outputs": [{"name": "output_0", "dtype": "float32", "shape": [None, 3]}],
        }
    ]
    assert [(f["name"], f["inputs"]) for f in info["functions"]] == [
        ("__call__", [{"name": "x", "dtype": "float32", "shape": [None, 4]}])
    ]
    assert info["accepted_input_dtypes"] == ["float32"]
    assert info["accepted_input_dtypes_by_endpoint"] == {"__call__": ["float32"], "serving_default": ["float32"]}


@requires_tf
def test_two_concrete_functions_float32_and_float16(built):
    info = _no_error(read_savedmodel(str(built[0] / "module_two")))
    assert info["signatures"] == []
    calls = sorted((f["inputs"][0]["dtype"], f["inputs"][1]["value"]) for f in info["functions"])
    assert calls == [("float16", True), ("float32", False)]
    assert {f["inputs"][1]["name"] for f in info["functions"]} == {"training"}
    assert info["accepted_input_dtypes"] == ["float16", "float32"]


@requires_tf
def test_nested_and_composite_inputs(built):
    info = _no_error(read_savedmodel(str(built[0] / "module_nested")))
    (function,) = [f for f in info["functions"] if f["name"] == "__call__"]
    assert function["inputs"] == [
        {"name": "features['feat']", "dtype": "bfloat16", "shape": [2, 3], "spec_name": "features_feat"},
        {"name": "features['ids']", "dtype": "int32", "shape": [None], "spec_name": "features_ids"},
        {"name": "tokens", "dtype": "float16", "shape": [None, None], "type_spec": "RaggedTensorSpec"},
    ]
    # tf.nest order sorts dict keys: the first tensor input is features['feat'].
    assert info["accepted_input_dtypes_by_endpoint"]["__call__"] == ["bfloat16"]


@requires_tf
def test_keras3_export(built):
    info = _no_error(read_savedmodel(str(built[0] / "keras3_export")))
    assert [s["name"] for s in info["signatures"]] == ["serve", "serving_default"]
    (serve,) = info["functions"]
    assert serve["name"] == "serve"
    assert serve["inputs"] == [{"name": "args_0", "dtype": "float32", "shape": [None, 4], "spec_name": "feat"}]
    assert info["accepted_input_dtypes"] == ["float32"]
    assert info["accepted_input_dtypes_by_endpoint"] == {"serve": ["float32"], "serving_default": ["float32"]}


@requires_tf
def test_tf_keras_model_save(built):
    info = _no_error(read_savedmodel(str(built[0] / "tf_keras_save")))
    calls = [f for f in info["functions"] if f["name"] == "__call__"]
    assert sorted(f["inputs"][1]["value"] for f in calls) == [False, True]
    assert all([i["name"] for i in f["inputs"]] == ["inputs", "training", "mask"] for f in calls)
    assert calls[0]["inputs"][0]["spec_name"] == "feat"
    assert info["signatures"][0]["outputs"] == [{"name": "d", "dtype": "float32", "shape": [None, 2]}]
    assert info["accepted_input_dtypes"] == ["float32"]


@requires_tf
def test_pbtxt_reads_like_pb(built):
    pb = _no_error(read_savedmodel(str(built[0] / "module_f32")))
    text = _no_error(read_savedmodel(str(built[0] / "module_f32_pbtxt")))
    for key in ("signatures", "functions", "accepted_input_dtypes", "accepted_input_dtypes_by_endpoint", "tags"):
        assert text[key] == pb[key]


@requires_tf
def test_file_url_and_relative_handles(built):
    out = built[0]
    assert _no_error(read_savedmodel("file://" + str(out / "module_f32")))["path"] == str(out / "module_f32")
    assert _no_error(read_savedmodel("module_f32", base_dir=str(out)))["path"] == str(out / "module_f32")


# ------------------------------------------------------------------------- no TensorFlow needed from here on


def _synthetic_saved_model(dtype=19) -> bytes:
    """A minimal SavedModel with one signature whose input has DataType `dtype` (19 = DT_HALF)."""
    saved_model = _message_classes()["SavedModel"]()
    meta_graph = saved_model.meta_graphs.add()
    meta_graph.meta_info_def.tags.append("serve")
    signature = meta_graph.signature_def["serving_default"]
    signature.method_name = "tensorflow/serving/predict"
    tensor = signature.inputs["images"]
    tensor.dtype = dtype
    tensor.tensor_shape.dim.add(size=-1)
    tensor.tensor_shape.dim.add(size=224)
    signature.outputs["logits"].dtype = 1
    signature.outputs["logits"].tensor_shape.unknown_rank = True
    return saved_model.SerializeToString()


def _error(info):
    assert info.path is None or os.path.isabs(info.path)
    assert info.signatures == [] and info.functions == [] and info.accepted_input_dtypes == []
    assert "\n" not in info.error.message
    return info.error


def test_missing_path(tmp_path):
    error = _error(read_savedmodel(str(tmp_path / "nope")))
    assert (error.kind, error.message) == ("missing", f"{tmp_path / 'nope'} does not exist")


def test_directory_without_saved_model(tmp_path):
    (tmp_path / "variables").mkdir()
    error = _error(read_savedmodel(str(tmp_path)))
    assert error.kind == "not_savedmodel" and str(tmp_path) in error.message


def test_file_instead_of_directory(tmp_path):
    (tmp_path / "model.keras").write_bytes(b"PK\x03\x04")
    error = _error(read_savedmodel(str(tmp_path / "model.keras")))
    assert error.kind == "not_savedmodel" and "model.keras" in error.message


@pytest.mark.parametrize(
    "data",
    [b"\x00\x01 this is not a protobuf \xff\xff", b"", _synthetic_saved_model()[:-7]],
    ids=["garbage", "empty", "truncated"],
)
def test_corrupt_saved_model(tmp_path, data):
    (tmp_path / "saved_model.pb").write_bytes(data)
    error = _error(read_savedmodel(str(tmp_path)))
    assert error.kind == "corrupt" and str(tmp_path / "saved_model.pb") in error.message


def test_corrupt_pbtxt(tmp_path):
    (tmp_path / "saved_model.pbtxt").write_text("meta_graphs { signature_def { key: ")
    error = _error(read_savedmodel(str(tmp_path)))
    assert error.kind == "corrupt" and "saved_model.pbtxt" in error.message


def test_synthetic_pb_and_pbtxt(tmp_path):
    (tmp_path / "pb").mkdir()
    (tmp_path / "pb" / "saved_model.pb").write_bytes(_synthetic_saved_model())
    info = _no_error(read_savedmodel(str(tmp_path / "pb")))
    assert info["signatures"] == [
        {
            "name": "serving_default",
            "method_name": "tensorflow/serving/predict",
            "inputs": [{"name": "images", "dtype": "float16", "shape": [None, 224]}],
            "outputs": [{"name": "logits", "dtype": "float32", "shape": None}],
        }
    ]
    assert info["accepted_input_dtypes"] == ["float16"] and info["functions"] == []
    (tmp_path / "txt").mkdir()
    (tmp_path / "txt" / "saved_model.pbtxt").write_text(
        'saved_model_schema_version: 1\nmeta_graphs {\n  meta_info_def { tags: "serve" }\n'
        '  graph_def { node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } } }\n'
        '  signature_def { key: "serving_default" value {\n'
        '    inputs { key: "images" value { name: "x:0" dtype: DT_BFLOAT16 tensor_shape { dim { size: -1 } } } }\n'
        '    method_name: "tensorflow/serving/predict" } }\n}\n'
    )
    info = _no_error(read_savedmodel(str(tmp_path / "txt")))
    assert info["signatures"][0]["inputs"] == [{"name": "images", "dtype": "bfloat16", "shape": [None]}]


HANDLE = "https://tfhub.dev/google/imagenet/mobilenet_v2_100_224/feature_vector/5"


def test_hub_cache_layout_is_tensorflow_hubs(monkeypatch, tmp_path):
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(tmp_path))
    assert hub_cache_path(HANDLE) == str(tmp_path / hashlib.sha1(HANDLE.encode("utf8")).hexdigest())
    monkeypatch.delenv("TFHUB_CACHE_DIR")
    import tempfile

    assert hub_cache_path(HANDLE).startswith(os.path.join(tempfile.gettempdir(), "tfhub_modules") + os.sep)


def test_https_handle_not_cached_is_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(tmp_path))
    os.makedirs(hub_cache_path(HANDLE))  # an empty directory is an interrupted download, not a cached model
    error = _error(read_savedmodel(HANDLE))
    assert error.kind == "offline" and HANDLE in error.message and str(tmp_path) in error.message
    kaggle = "https://www.kaggle.com/models/google/mobilenet-v2/TensorFlow2/100-224-feature-vector/1"
    assert _error(read_savedmodel(kaggle)).kind == "offline"
    assert _error(read_savedmodel("gs://bucket/model")).kind == "offline"


def test_https_handle_in_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(tmp_path))
    cached = hub_cache_path(HANDLE)
    os.makedirs(os.path.join(cached, "variables"))
    with open(os.path.join(cached, "saved_model.pb"), "wb") as handle:
        handle.write(_synthetic_saved_model(dtype=1))
    info = _no_error(read_savedmodel(HANDLE))
    assert info["handle"] == HANDLE and info["path"] == cached
    assert info["accepted_input_dtypes"] == ["float32"]
    # The cache key is the handle exactly as written, like tensorflow_hub's.
    assert _error(read_savedmodel(HANDLE + "/")).kind == "offline"


def test_reading_never_imports_tensorflow(tmp_path):
    (tmp_path / "saved_model.pb").write_bytes(_synthetic_saved_model())
    probe = (
        "import sys; from mpdoctor.artifacts.savedmodel import read_savedmodel; "
        f"info = read_savedmodel({str(tmp_path)!r}); assert info.error is None, info; "
        "print(sorted(m for m in ('tensorflow', 'keras', 'tf_keras', 'numpy') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
