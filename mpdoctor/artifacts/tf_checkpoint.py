"""An open TF checkpoint (TF2 object-based or TF1 name-based): dtypes and shapes from the index (TF's
CheckpointReader dtype/shape maps), every variable's object path from the object graph, and tensors one at a time.

Float tensors stream straight from their data shard at the offset the bundle index gives, 1 MiB at a time into one
reused buffer (constant memory); `verify_checksums=True` reads whole tensors through TF's CheckpointReader instead,
which also checks their CRC32C.
"""

from __future__ import annotations

import glob
import os
import threading
from collections import deque
from collections.abc import Iterator

import numpy as np

from mpdoctor.artifacts.backends import load_tensorflow, numpy_dtype, tf_message
from mpdoctor.artifacts.bundle_index import BundleEntry, bundle_index, check_bundle_index
from mpdoctor.artifacts.errors import CheckpointError
from mpdoctor.artifacts.locate import DATA_SHARD_RE

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


def _shards(prefix: str) -> list[str]:
    """The data shard files of `prefix`; raises CheckpointError when one is missing."""
    groups: dict[int, dict[int, str]] = {}
    for name in glob.glob(glob.escape(prefix) + ".data-*"):
        match = DATA_SHARD_RE.search(name)
        if match and name[: -len(match.group(0))] == prefix:
            groups.setdefault(int(match.group(2)), {})[int(match.group(1))] = name
    if not groups:
        raise CheckpointError(f"{prefix}.data-00000-of-00001", "missing: the index has no data shard beside it")
    complete = [n for n, found in groups.items() if len(found) == n and set(found) == set(range(n))]
    if complete:
        found = groups[max(complete)]
        return [found[i] for i in range(max(complete))]
    total = max(groups, key=lambda n: len(groups[n]))
    missing = min(set(range(total)) - set(groups[total]))
    raise CheckpointError(f"{prefix}.data-{missing:05d}-of-{total:05d}", "missing data shard")


def _object_paths(graph_bytes: bytes) -> dict[str, str]:
    """checkpoint key -> object path ("model/layer_with_weights-0/kernel") from the checkpoint's object graph."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(graph_bytes)
    paths: dict[int, str] = {0: ""}
    queue = deque([0])
    while queue:
        node_id = queue.popleft()
        for child in graph.nodes[node_id].children:
            if child.node_id not in paths and child.node_id < len(graph.nodes):
                paths[child.node_id] = f"{paths[node_id]}/{child.local_name}" if paths[node_id] else child.local_name
                queue.append(child.node_id)
    for node_id, node in enumerate(graph.nodes):
        for slot in node.slot_variables:
            if slot.slot_variable_node_id not in paths and slot.original_variable_node_id in paths and node_id in paths:
                paths[slot.slot_variable_node_id] = (
                    f"{paths[slot.original_variable_node_id]}/.OPTIMIZER_SLOT/{paths[node_id]}/{slot.slot_name}"
                )
    result = {}
    for node_id, node in enumerate(graph.nodes):
        for attribute in node.attributes:
            if node_id in paths:
                result[attribute.checkpoint_key] = paths[node_id]
    return result


def _export_mirrors(paths: dict[str, str], dtypes: dict, shapes: dict) -> set[str]:
    """The keys under `_all_variables/` when they repeat `variables/` one for one.

    Keras 3 `model.export()` (its ExportArchive) tracks the model's variables twice, as `variables/N` and as
    `_all_variables/N`, and the checkpoint stores both (the same values, in another order). A listing shows them
    once: these keys are left out of it when both lists exist and hold the same dtypes and shapes. Conversion and
    restores still see every key."""
    lists: dict[str, list[str]] = {"variables": [], "_all_variables": []}
    for key, path in paths.items():
        head, _, index = path.partition("/")
        if head in lists and index.isdigit():
            lists[head].append(key)
    ours, mirror = lists["variables"], lists["_all_variables"]

    def signature(keys: list[str]) -> list:
        return sorted((str(dtypes.get(k)), tuple(shapes.get(k) or ())) for k in keys)

    if not ours or len(ours) != len(mirror) or signature(ours) != signature(mirror):
        return set()
    return set(mirror)


class TFSource:
    """An open TF checkpoint: metadata from the index, tensors one at a time."""

    def __init__(self, prefix: str):
        tf = load_tensorflow()
        self.prefix = prefix
        self.index = prefix + ".index"
        self.shards = _shards(prefix)
        check_bundle_index(self.index)  # before TF's reader, which aborts on a crafted shape
        try:
            self.reader = tf.train.load_checkpoint(prefix)
            dtypes = self.reader.get_variable_to_dtype_map()
            shapes = self.reader.get_variable_to_shape_map()
        except Exception as exc:
            raise CheckpointError(self.index, f"cannot read the checkpoint index: {tf_message(exc)}") from None
        self.dtypes = {k: v.name for k, v in dtypes.items()}
        self.shapes = {k: [int(d) for d in v] for k, v in shapes.items()}
        self.object_based = OBJECT_GRAPH_KEY in self.dtypes
        self.format = "tf2-object" if self.object_based else "tf1-name"
        self.data_bytes = sum(os.path.getsize(s) for s in self.shards)
        parsed = bundle_index(self.index)
        self.entries: dict[str, BundleEntry] | None = None
        if parsed is not None:
            num_shards, entries = parsed
            if num_shards != len(self.shards):
                missing = (
                    f"{prefix}.data-{len(self.shards) if num_shards > len(self.shards) else 0:05d}-of-{num_shards:05d}"
                )
                raise CheckpointError(
                    missing, f"missing data shard: the index names {num_shards} shards, {len(self.shards)} found"
                )
            sizes = [os.path.getsize(shard) for shard in self.shards]
            for key, entry in entries.items():
                if entry.shard >= len(sizes) or entry.offset + entry.size > sizes[entry.shard]:
                    where = self.shards[min(entry.shard, len(sizes) - 1)]
                    raise CheckpointError(
                        where,
                        f"truncated data shard: {sizes[min(entry.shard, len(sizes) - 1)]:,} "
                        f"bytes on disk, the index places tensor {key!r} up to byte "
                        f"{entry.offset + entry.size:,}",
                    )
            self.entries = entries
        else:
            numeric = sum(nbytes(self.dtypes[k], self.shapes[k]) or 0 for k in self.dtypes)
            if numeric > self.data_bytes:
                where = self.shards[0] if len(self.shards) == 1 else prefix + ".data-*"
                raise CheckpointError(
                    where,
                    f"truncated data shard: {self.data_bytes:,} bytes on disk, the index "
                    f"describes at least {numeric:,}",
                )
        self.object_paths: dict[str, str] = {}
        if self.object_based:
            try:
                self.object_paths = _object_paths(self.read(OBJECT_GRAPH_KEY))
            except CheckpointError:
                raise
            except Exception as exc:
                raise CheckpointError(self.index, f"cannot parse the checkpoint's object graph: {exc}") from None
        self.mirrors = _export_mirrors(self.object_paths, self.dtypes, self.shapes)

    def all_keys(self) -> list[str]:
        return sorted(self.dtypes)

    def read(self, key: str):
        try:
            return self.reader.get_tensor(key)
        except Exception as exc:
            where = self.shards[0] if len(self.shards) == 1 else self.prefix + ".data-*"
            message = tf_message(exc)
            if "Read less bytes than requested" in message or "OutOfRange" in type(exc).__name__:
                raise CheckpointError(where, f"truncated data shard: cannot read tensor {key!r} ({message})") from None
            if "Checksum does not match" in message:
                raise CheckpointError(where, f"corrupt data shard: tensor {key!r} fails its checksum") from None
            raise CheckpointError(where, f"cannot read tensor {key!r}: {message}") from None

    def files(self) -> list[str]:
        return [self.index, *self.shards]

    def pieces(self, key: str, verify_checksums: bool = False) -> Iterator[np.ndarray]:
        """The values of `key`. A float tensor is read straight from its shard at the offset the index gives, in
        chunks of _READ_BYTES into one reused buffer (constant memory, no checksum); otherwise, or with
        `verify_checksums`, the whole tensor through TF's reader, which checks the tensor's CRC32C."""
        entry = self.entries.get(key) if self.entries is not None and not verify_checksums else None
        dtype = self.dtypes[key]
        itemsize = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}.get(dtype)
        count = int(np.prod(self.shapes[key], dtype=np.int64))
        if entry is None or itemsize is None or entry.size != count * itemsize:
            yield np.asarray(self.read(key))
            return
        np_dtype = numpy_dtype(dtype)
        buffer = _read_buffer()
        step = (buffer.size // itemsize) * itemsize
        path = self.shards[entry.shard]
        try:
            with open(path, "rb", buffering=0) as handle:
                handle.seek(entry.offset)
                remaining = entry.size
                while remaining:
                    want = min(step, remaining)
                    view = buffer[:want]
                    got = 0
                    while got < want:
                        n = handle.readinto(memoryview(view)[got:])
                        if not n:
                            raise CheckpointError(
                                path, f"truncated data shard: tensor {key!r} ends past the end of the file"
                            )
                        got += n
                    remaining -= want
                    yield view.view(np_dtype)
        except OSError as exc:
            raise CheckpointError(path, f"cannot read: {exc.strerror or exc}") from None


_READ_BYTES = 1 << 20
_local = threading.local()


def _read_buffer() -> np.ndarray:
    if not hasattr(_local, "read"):
        _local.read = np.empty(_READ_BYTES, np.uint8)
    return _local.read


def nbytes(dtype: str, shape) -> int | None:
    sizes = {
        "float16": 2,
        "bfloat16": 2,
        "float32": 4,
        "float64": 8,
        "int8": 1,
        "uint8": 1,
        "int16": 2,
        "uint16": 2,
        "int32": 4,
        "uint32": 4,
        "int64": 8,
        "uint64": 8,
        "bool": 1,
        "complex64": 8,
        "complex128": 16,
    }
    if dtype not in sizes:
        return None
    return sizes[dtype] * int(np.prod(shape, dtype=np.int64)) if shape else sizes[dtype]
