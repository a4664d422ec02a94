"""Which checkpoint values a traced restore left unused and which variables it left without a value (MP304).

Runs in the trace child after the model's first call, so restorations that TF deferred until a layer built its
variables have happened by then. Only names leave the child.
"""

from __future__ import annotations

from typing import Any

from mpdoctor.facts.schema import ErrorRecord, Restore, Unmatched
from mpdoctor.trace.child import backends

_MAX_NAMES = 50  # per side and restore; the counts stay exact


def match_restores(live_restores: list[tuple[Restore, Any, Any]]) -> dict[int, dict[str, Any]]:
    """Add `unmatched` to each recorded restore entry whose API reports matching: TF2 object-based restores (a
    tf.train.Checkpoint, tf_keras `load_weights` of a TF-format checkpoint) and TF1 `Saver.restore`. Returns, per
    restore (by id), the variable each checkpoint key was restored into (for the range audit, which judges each
    value by the layer that uses it)."""
    resolved: dict[int, dict[str, Any]] = {}
    for entry, receiver, result in live_restores:
        if entry.error:
            continue
        try:
            if _is_object_based_status(result):
                entry.unmatched = _object_based(result)
                resolved[id(entry)] = _restored_objects(result)
            elif type(receiver).__name__ == "Saver" and entry.path:
                entry.unmatched = _name_based(receiver, entry.path)
                resolved[id(entry)] = _saver_variables(receiver)
        except Exception as exc:
            entry.unmatched_error = f"{type(exc).__name__}: {exc}"
    return resolved


def match_checkpoint(entry: Restore, recorder: Any) -> dict[str, Any]:
    """`check --checkpoint PATH`: read an object-based checkpoint into each analysed model, as the root of the
    checkpoint (`model.save_weights`) and as its `model` attribute (`tf.train.Checkpoint(model=...)`); the reading
    that matches the most values is the intended one. A dtype error is recorded like a failed restore (MP301).
    Off TensorFlow (JAX, PyTorch) nothing is matched: reading a tf.train checkpoint is TensorFlow's."""
    if not backends.tensorflow():
        return {}
    import tensorflow as tf

    from mpdoctor.artifacts.bundle_index import check_tf_checkpoint

    try:
        check_tf_checkpoint(entry.path)  # TF's reader aborts the process on a crafted index: validate it first
        if not tf.train.load_checkpoint(entry.path).has_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"):
            return {}  # name-based (TF1) or Keras files: their keys do not name a model's objects
    except Exception:
        return {}
    best = None
    recorder.active_sinks.add(id(recorder.restores))  # these reads are mpdoctor's, not restores of the user's
    try:
        for model in recorder.analysed_models:
            record = recorder.layers.get(str(id(model)))
            created_at = record.created_at if record is not None else None
            for attach in ({"root": model}, {"model": model}):
                try:
                    status = tf.train.Checkpoint(**attach).read(entry.path).expect_partial()
                except Exception as exc:
                    entry.error = ErrorRecord(type(exc).__name__, str(exc)[:4000])
                    entry.location = created_at
                    return {}
                matched = len(status._checkpoint.object_by_proto_id)
                if best is None or matched > best[0]:
                    best = (matched, status, created_at)
    finally:
        recorder.active_sinks.discard(id(recorder.restores))
    if best is None:
        return {}
    _, status, entry.location = best
    entry.unmatched = _object_based(status)
    entry.unmatched.expect_partial = False  # --checkpoint asks for the whole checkpoint to match
    return _restored_objects(status)


def _restored_objects(status: Any) -> dict[str, Any]:
    """checkpoint key -> the object (variable) an object-based restore matched it to."""
    coordinator = status._checkpoint
    nodes = coordinator.object_graph_proto.nodes
    return {
        attribute.checkpoint_key: obj
        for node_id, obj in coordinator.object_by_proto_id.items()
        for attribute in nodes[node_id].attributes
    }


def _saver_variables(saver: Any) -> dict[str, Any]:
    """checkpoint key -> variable of a TF1 Saver (its keys are the variables' names)."""
    from tensorflow.python.training.saving import saveable_object_util

    return dict(saveable_object_util.op_list_to_dict(saver._var_list))


def _is_object_based_status(result: Any) -> bool:
    checkpoint = getattr(result, "_checkpoint", None)
    return hasattr(checkpoint, "object_graph_proto") and hasattr(checkpoint, "object_by_proto_id")


def _object_based(status: Any) -> Unmatched:
    from tensorflow.python.checkpoint import checkpoint as checkpoint_lib
    from tensorflow.python.checkpoint import util

    coordinator = status._checkpoint
    proto = coordinator.object_graph_proto
    names = checkpoint_lib.ObjectGraphProtoPrettyPrinter(proto).node_names
    unused = [
        names[node_id]
        for node_id, node in enumerate(proto.nodes)
        if node.attributes and node_id not in coordinator.object_by_proto_id
    ]
    unused += [
        f"{names[node_id]}.{attribute}"
        for node_id, attributes in coordinator.unused_attributes.items()
        for attribute in attributes
    ]
    matched = {id(obj) for obj in coordinator.object_by_proto_id.values()}
    holders = checkpoint_lib._objects_with_attributes(util.list_objects(status._object_graph_view))
    # The Checkpoint's own counter, made by restore() itself when the file has none (`write()`, a Keras save): not a
    # variable of the model (issue 29).
    counter = getattr(getattr(status._object_graph_view, "root", None), "_save_counter", None)
    missing = [_variable_name(obj) for obj in holders if id(obj) not in matched and obj is not counter]
    return _summary("object", unused, missing, bool(getattr(coordinator, "expect_partial", False)))


def _name_based(saver: Any, path: str) -> Unmatched:
    import tensorflow as tf
    from tensorflow.python.training.saving import saveable_object_util

    restored = set(saveable_object_util.op_list_to_dict(saver._var_list))
    unused = [key for key, _ in tf.train.list_variables(path) if key not in restored]
    # A Saver fails on a variable the checkpoint lacks, so a completed restore leaves none without a value.
    return _summary("name", unused, [], False)


def _variable_name(obj: Any) -> str:
    name = getattr(obj, "path", None) or getattr(obj, "name", None) or type(obj).__name__
    return str(name).removesuffix(":0")


def _summary(kind: str, unused: list[str], missing: list[str], expect_partial: bool) -> Unmatched:
    return Unmatched(kind, expect_partial, len(unused), unused[:_MAX_NAMES], len(missing), missing[:_MAX_NAMES])
