"""Checkpoints and weight files: readers, the float16/bfloat16 range audit and the converter.

Formats (`read_checkpoint(path)["format"]`):
- ``tf2-object``: TF2 object-based checkpoint (`tf.train.Checkpoint`, Keras 2 `save_weights` in TF format); every
  variable also has the object path from the checkpoint's object graph.
- ``tf1-name``: TF1 name-based checkpoint (`tf.compat.v1.train.Saver`); keys are the variable names.
- ``keras2-h5``: Keras 2 `.h5` (`model.save("m.h5")` or `save_weights("w.h5")`); keys are the HDF5 dataset paths.
- ``keras3-weights-h5``: Keras 3 `.weights.h5`; keys are the HDF5 dataset paths (`layers/dense/vars/0`).
- ``keras3-archive``: Keras 3 `.keras` zip archive; the weights are its `model.weights.h5` member.

Dtypes and shapes come from the index (TF's CheckpointReader dtype/shape maps) or the HDF5 metadata; no tensor is
read. The audit streams: for TF checkpoints each float tensor is read from its data shard at the offset the bundle
index gives, 1 MiB at a time into one reused buffer (constant memory; `verify_checksums=True` reads whole tensors
through TF's CheckpointReader instead, which also checks their CRC32C); for HDF5, row slabs of at most `SLAB_BYTES`.
The converter reads one tensor at a time through TF's reader (checksums checked), writes batches of at most
`_BATCH_BYTES` (one data shard each, merged by MergeV2Checkpoints), so its peak memory is about the largest tensor
plus a constant.

Range audit thresholds (the contract of MP302/MP303 in docs/RULES.md), for a float16 target:
- overflow: finite |x| > 65504 (float16 max), reported with max |x| (finite values);
- flushed: 0 < |x| < 2**-24 (5.96e-8, the smallest float16 subnormal);
- subnormal: 2**-24 <= |x| < 2**-14 (6.10e-5, the smallest float16 normal); disjoint from flushed;
- nonfinite: inf/NaN already in the checkpoint.
For a bfloat16 target the same counts use bfloat16's limits, plus the relative precision loss of rounding each value
to bfloat16 (max and mean over the nonzero finite values).

Errors are `CheckpointError(path, problem)`: `str()` is "PATH: problem", PATH naming the file at fault.
"""

from __future__ import annotations

import contextlib
import glob
import io
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import warnings
import zipfile
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from mpdoctor import writes

FORMAT_DESCRIPTIONS = {
    "tf2-object": "TF2 object-based checkpoint (tf.train.Checkpoint / Keras 2 save_weights, TF format)",
    "tf1-name": "TF1 name-based checkpoint (tf.compat.v1.train.Saver)",
    "keras2-h5": "Keras 2 HDF5 weights (.h5)",
    "keras3-weights-h5": "Keras 3 weights (.weights.h5)",
    "keras3-archive": "Keras 3 archive (.keras)",
}
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
TARGET_DTYPES = ("float16", "bfloat16", "float32")
DEFAULT_UNDERFLOW_THRESHOLD = 0.01  # MP303 warns when more than this fraction of a variable flushes or is subnormal

# (max finite, smallest normal, smallest subnormal) of each target dtype.
LIMITS = {
    "float16": (65504.0, 2.0**-14, 2.0**-24),
    "bfloat16": (3.3895313892515355e38, 2.0**-126, 2.0**-133),
    "float32": (3.4028234663852886e38, 2.0**-126, 2.0**-149),
}
_LIMIT_TEXT = {"float16": "65504", "bfloat16": "3.39e38", "float32": "3.40e38"}
OVERFLOW_MODES = ("refuse", "saturate", "allow")  # convert_checkpoint: values beyond the target's range
# The same thresholds as float32 bit patterns of |x| (sign bit cleared): the fast path compares integers.
_BITS = {
    "float16": (0x477FE000, 0x38800000, 0x33800000),
    "bfloat16": (0x7F7F0000, 0x00800000, 0x0),
    "float32": (0x7F7FFFFF, 0x00800000, 0x0),
}
_INF_BITS = 0x7F800000
_CHUNK = 1 << 18  # elements per in-cache chunk of the audit kernel (1 MiB of float32)
SLAB_BYTES = 16 << 20  # HDF5 datasets are read and written in row slabs of at most this size
_BATCH_BYTES = 64 << 20  # the TF converter saves this many bytes per SaveV2 call (one data shard each)


class CheckpointError(Exception):
    """A checkpoint that cannot be read or written. `path` names the file at fault."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class WouldOverflow(CheckpointError):
    """convert_checkpoint(overflow="refuse"): the cast turns finite values into inf; nothing was written.
    `variables`: {key: how many of its values would become inf}."""

    def __init__(self, path: str, target: str, variables: dict[str, int]):
        total = sum(variables.values())
        names = ", ".join(repr(k) for k in list(variables)[:5]) + (", ..." if len(variables) > 5 else "")
        limit = _LIMIT_TEXT[target]
        super().__init__(
            path,
            f"not written: {total:,} value{'' if total == 1 else 's'} of {len(variables)} "
            f"variable{'' if len(variables) == 1 else 's'} would become inf in {target} ({names}); "
            f"--saturate clamps them to +-{limit}, --allow-inf keeps inf",
        )
        self.variables = variables


# --------------------------------------------------------------------------------------------------------------------
# Quiet TensorFlow: its import and first eager op print absl/CUDA lines on the C-level stderr.

_tf_module = None
_eager_ready = False


@contextlib.contextmanager
def _quiet_stderr():
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _tf():
    global _tf_module
    if _tf_module is None:
        if "tensorflow" in sys.modules and hasattr(sys.modules["tensorflow"], "train"):
            _tf_module = sys.modules["tensorflow"]
        else:
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            try:
                with _quiet_stderr():
                    import tensorflow as tf
            except ImportError as exc:
                raise CheckpointError("tensorflow", f"TensorFlow is needed to read TF checkpoints: {exc}") from None
            _tf_module = tf
    return _tf_module


def _tf_eager():
    global _eager_ready
    tf = _tf()
    if not _eager_ready:
        with _quiet_stderr():
            tf.constant(0)
        _eager_ready = True
    return tf


def _tf_message(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    text = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    text = re.sub(r"^Unsuccessful TensorSliceReader constructor: ", "", text)
    text = re.sub(r"\s*\[Op:\w+\].*$", "", text)
    return text if len(text) <= 240 else text[:237] + "..."


def _h5py():
    try:
        import h5py
    except ImportError as exc:
        raise CheckpointError("h5py", f"h5py is needed to read HDF5 weights: {exc}") from None
    return h5py


def _bfloat16():
    try:
        import ml_dtypes
    except ImportError as exc:
        raise CheckpointError("ml_dtypes", f"ml_dtypes is needed for bfloat16: {exc}") from None
    return np.dtype(ml_dtypes.bfloat16)


def _np_dtype(name: str) -> np.dtype:
    return _bfloat16() if name == "bfloat16" else np.dtype(name)


# --------------------------------------------------------------------------------------------------------------------
# Locating an artifact


@dataclass(frozen=True)
class Located:
    kind: str  # "tf" | "h5" | "keras" | "savedmodel"
    path: str  # as given
    target: str  # the checkpoint prefix (tf), the file (h5, keras) or the directory (savedmodel)
    from_dir: bool = False  # a TF checkpoint found through its directory (`checkpoint` state file)


_DATA_RE = re.compile(r"\.data-(\d{5})-of-(\d{5})$")
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _is_hdf5(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            for offset in (0, 512, 1024, 2048, 4096):  # HDF5 allows a user block of 512 * 2**n bytes
                handle.seek(offset)
                if handle.read(8) == _HDF5_SIGNATURE:
                    return True
    except OSError:
        return False
    return False


def _latest_from_state(directory: str) -> str | None:
    state = os.path.join(directory, "checkpoint")
    if not os.path.isfile(state):
        return None
    try:
        with open(state, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError as exc:
        raise CheckpointError(state, f"cannot read: {exc.strerror or exc}") from None
    match = re.search(r'^model_checkpoint_path:\s*"((?:[^"\\]|\\.)*)"', text, re.MULTILINE)
    if not match:
        raise CheckpointError(state, "checkpoint state file names no model_checkpoint_path")
    name = match.group(1).encode().decode("unicode_escape")
    return name if os.path.isabs(name) else os.path.join(directory, name)


def _check_prefix(prefix: str, shown: str | None = None) -> None:
    if os.path.isfile(prefix + ".index"):
        return
    if glob.glob(glob.escape(prefix) + ".data-*"):
        raise CheckpointError(prefix + ".index", "missing: the checkpoint prefix has data shards but no index file")
    if shown and shown != prefix:  # a data shard or a state file named a prefix that has no index
        raise CheckpointError(prefix + ".index", "missing: no checkpoint index for this prefix")
    if re.search(r"\.(h5|hdf5|keras|index|meta|pb)$", prefix):
        raise CheckpointError(prefix, "no such file or directory")
    raise CheckpointError(
        prefix, f"no such file or directory (and no checkpoint index {os.path.basename(prefix)}.index beside it)"
    )


def locate(path: str | os.PathLike) -> Located:
    """Find what `path` names: a checkpoint prefix, index or data file, a checkpoint directory, an HDF5 or .keras
    file, or a SavedModel directory. Raises CheckpointError otherwise."""
    path = os.fspath(path)
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "saved_model.pb")) or os.path.isfile(
            os.path.join(path, "saved_model.pbtxt")
        ):
            return Located("savedmodel", path, path)
        latest = _latest_from_state(path)
        if latest is not None:
            _check_prefix(latest, os.path.join(path, "checkpoint"))
            return Located("tf", path, latest, from_dir=True)
        indexes = sorted(glob.glob(os.path.join(glob.escape(path), "*.index")))
        if len(indexes) == 1:
            return Located("tf", path, indexes[0][: -len(".index")], from_dir=True)
        if len(indexes) > 1:
            names = ", ".join(os.path.basename(i) for i in indexes[:3]) + (", ..." if len(indexes) > 3 else "")
            raise CheckpointError(
                path,
                f"directory holds {len(indexes)} checkpoints ({names}) and no `checkpoint` "
                "state file: pass one checkpoint prefix",
            )
        if glob.glob(os.path.join(glob.escape(path), "*.data-*")):
            raise CheckpointError(path, "directory holds checkpoint data shards but no .index file")
        raise CheckpointError(
            path,
            "not a checkpoint: the directory holds no `checkpoint` state file, no *.index file and no saved_model.pb",
        )
    if os.path.isfile(path):
        base = os.path.basename(path)
        if base.endswith(".index"):
            return Located("tf", path, path[: -len(".index")])
        match = _DATA_RE.search(base)
        if match:
            prefix = path[: -len(match.group(0))]
            _check_prefix(prefix, path)
            return Located("tf", path, prefix)
        if base.endswith(".meta") and os.path.isfile(path[: -len(".meta")] + ".index"):
            return Located("tf", path, path[: -len(".meta")])
        if base == "checkpoint":
            return locate(os.path.dirname(path) or ".")
        if base in ("saved_model.pb", "saved_model.pbtxt"):
            return Located("savedmodel", path, os.path.dirname(path) or ".")
        if _is_hdf5(path):
            return Located("h5", path, path)
        if zipfile.is_zipfile(path):
            return Located("keras", path, path)
        if base.endswith((".h5", ".hdf5", ".keras")):
            kind = "a zip archive" if base.endswith(".keras") else "an HDF5 file"
            raise CheckpointError(path, f"not {kind} (bad signature): the file is corrupt or is not Keras weights")
        if os.path.isfile(path + ".index"):
            return Located("tf", path, path)
        raise CheckpointError(
            path,
            "not a checkpoint: expected a checkpoint prefix or .index file, a .h5, "
            ".weights.h5 or .keras file, or a SavedModel directory",
        )
    if os.path.isfile(path + ".index"):
        return Located("tf", path, path)
    _check_prefix(path, path)
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------------------------------------------------
# TF checkpoints


def _shards(prefix: str) -> list[str]:
    """The data shard files of `prefix`; raises CheckpointError when one is missing."""
    groups: dict[int, dict[int, str]] = {}
    for name in glob.glob(glob.escape(prefix) + ".data-*"):
        match = _DATA_RE.search(name)
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


_TABLE_MAGIC = 0xDB4775248B80FB57


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("bad varint")


def _table_entries(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of an uncompressed LevelDB-format table (TF's tensor bundle index: tensorflow/core/lib/io)."""
    if len(data) < 48 or int.from_bytes(data[-8:], "little") != _TABLE_MAGIC:
        raise ValueError("not an sstable (bad magic number)")
    footer = data[-48:-8]
    _, pos = _varint(footer, 0)
    _, pos = _varint(footer, pos)  # metaindex handle
    index_offset, pos = _varint(footer, pos)
    index_size, _ = _varint(footer, pos)
    for _, handle in _block_entries(data, index_offset, index_size):
        offset, pos = _varint(handle, 0)
        size, _ = _varint(handle, pos)
        yield from _block_entries(data, offset, size)


def _block_entries(data: bytes, offset: int, size: int) -> Iterator[tuple[bytes, bytes]]:
    if offset + size + 5 > len(data):
        raise ValueError("block past the end of the file")
    if data[offset + size] != 0:
        raise ValueError("compressed block")
    block = data[offset : offset + size]
    restarts = int.from_bytes(block[-4:], "little")
    end = len(block) - 4 * (restarts + 1)
    pos, key = 0, b""
    while pos < end:
        shared, pos = _varint(block, pos)
        unshared, pos = _varint(block, pos)
        length, pos = _varint(block, pos)
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        yield key, block[pos : pos + length]
        pos += length


@dataclass(frozen=True)
class _Entry:
    shard: int
    offset: int
    size: int


def _bundle_index(index: str) -> tuple[int, dict[str, _Entry]] | None:
    """(num_shards, {key: where its bytes are}) from a tensor bundle index (tensorflow/core/util/tensor_bundle);
    None when it cannot be parsed here (big-endian data, a compressed block, ...): TF's own reader then has the
    last word. Sliced (partitioned) entries are left out."""
    try:
        from tensorflow.core.protobuf import tensor_bundle_pb2

        with open(index, "rb") as handle:
            data = handle.read()
        shards = 1
        entries: dict[str, _Entry] = {}
        for key, value in _table_entries(data):
            if key == b"":
                header = tensor_bundle_pb2.BundleHeaderProto()
                header.ParseFromString(value)
                if header.endianness != tensor_bundle_pb2.BundleHeaderProto.LITTLE or sys.byteorder != "little":
                    return None
                shards = header.num_shards
                continue
            entry = tensor_bundle_pb2.BundleEntryProto()
            entry.ParseFromString(value)
            if not entry.slices:
                entries[key.decode("utf-8", "surrogateescape")] = _Entry(entry.shard_id, entry.offset, entry.size)
        return shards, entries
    except Exception:
        return None


# DataType enum (tensorflow/core/framework/types.proto) -> bytes per element; absent: variable-size (strings...).
_ITEMSIZE = {1: 4, 2: 8, 3: 4, 4: 1, 5: 2, 6: 1, 8: 8, 9: 8, 10: 1, 11: 1, 12: 1, 13: 4, 14: 2, 15: 2, 16: 2, 17: 2}
_ITEMSIZE.update({18: 16, 19: 2, 22: 4, 23: 8})
_DT_STRING = 7
_MAX_RANK = 254  # TensorShape::MaxDimensions()
_INT64_MAX = 2**63 - 1


def check_bundle_index(index: str) -> None:
    """Validate what TensorFlow's reader would CHECK-fail on (abort the whole process, exit 134) or allocate without
    limit before it sees the index: every entry's shape must be a valid TensorShape (known rank of at most 254, no
    negative dimension, an element count within int64) whose bytes are the bytes the entry records (which
    _TFSource then finds in the data shard, or reports a truncated shard). Raises CheckpointError "corrupt
    checkpoint: ..." for a crafted or damaged index."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import tensor_bundle_pb2

    try:
        with open(index, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise CheckpointError(index, f"cannot read: {exc.strerror or exc}") from None
    try:
        rows = list(_table_entries(data))
    except (ValueError, IndexError) as exc:  # TF writes uncompressed tables only: a compressed block is damage too
        raise CheckpointError(index, f"cannot read the checkpoint index: {exc or 'truncated'}") from None
    for key, value in rows:
        if key == b"":
            continue  # the header
        name = key.decode("utf-8", "backslashreplace")
        entry = tensor_bundle_pb2.BundleEntryProto()
        try:
            entry.ParseFromString(value)
        except DecodeError:
            raise CheckpointError(index, f"corrupt checkpoint: the entry of {name!r} does not parse") from None
        problem = _shape_problem(entry.shape)
        if problem is None and not entry.slices:
            problem = _size_problem(entry)
        if problem:
            raise CheckpointError(index, f"corrupt checkpoint: tensor {name!r}: {problem}")


def check_tf_checkpoint(path: str | os.PathLike) -> None:
    """`check_bundle_index` for whatever TF checkpoint `path` names (prefix, index, directory); other artifacts
    pass. For code about to hand `path` to TensorFlow's own reader. Raises CheckpointError."""
    located = locate(path)
    if located.kind == "tf":
        check_bundle_index(located.target + ".index")


def _size_problem(entry) -> str | None:
    """The bytes the shape needs against the bytes the entry records (TF writes exactly the tensor's bytes; a
    string takes at least its length byte). Whether the data shard holds them is checked with the shards."""
    elements = _elements(entry.shape)
    itemsize = _ITEMSIZE.get(entry.dtype)
    if itemsize and elements * itemsize != entry.size:
        dims = [d.size for d in entry.shape.dim]
        return f"its shape {dims} needs {elements * itemsize:,} bytes, the index records {entry.size:,}"
    if entry.dtype == _DT_STRING and elements > entry.size:
        return f"its shape holds {elements:,} strings in {entry.size:,} bytes"
    return None


def _shape_problem(shape) -> str | None:
    dims = [d.size for d in shape.dim]
    if shape.unknown_rank:
        return "its shape has an unknown rank"
    if len(dims) > _MAX_RANK:
        return f"its shape has {len(dims)} dimensions (at most {_MAX_RANK})"
    if any(d < 0 for d in dims):
        return f"its shape {dims} has a negative dimension"
    if _elements(shape) > _INT64_MAX:
        return f"its shape {dims} holds more elements than int64 counts"
    return None


def _elements(shape) -> int:
    count = 1
    for d in shape.dim:
        count *= d.size
    return count


class _TFSource:
    """An open TF checkpoint: metadata from the index, tensors one at a time."""

    def __init__(self, prefix: str):
        tf = _tf()
        self.prefix = prefix
        self.index = prefix + ".index"
        self.shards = _shards(prefix)
        check_bundle_index(self.index)  # before TF's reader, which aborts on a crafted shape
        try:
            self.reader = tf.train.load_checkpoint(prefix)
            dtypes = self.reader.get_variable_to_dtype_map()
            shapes = self.reader.get_variable_to_shape_map()
        except Exception as exc:
            raise CheckpointError(self.index, f"cannot read the checkpoint index: {_tf_message(exc)}") from None
        self.dtypes = {k: v.name for k, v in dtypes.items()}
        self.shapes = {k: [int(d) for d in v] for k, v in shapes.items()}
        self.object_based = OBJECT_GRAPH_KEY in self.dtypes
        self.format = "tf2-object" if self.object_based else "tf1-name"
        self.data_bytes = sum(os.path.getsize(s) for s in self.shards)
        parsed = _bundle_index(self.index)
        self.entries: dict[str, _Entry] | None = None
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
            numeric = sum(_nbytes(self.dtypes[k], self.shapes[k]) or 0 for k in self.dtypes)
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

    def keys(self) -> list[str]:
        return sorted(self.dtypes)

    def read(self, key: str):
        try:
            return self.reader.get_tensor(key)
        except Exception as exc:
            where = self.shards[0] if len(self.shards) == 1 else self.prefix + ".data-*"
            message = _tf_message(exc)
            if "Read less bytes than requested" in message or "OutOfRange" in type(exc).__name__:
                raise CheckpointError(where, f"truncated data shard: cannot read tensor {key!r} ({message})") from None
            if "Checksum does not match" in message:
                raise CheckpointError(where, f"corrupt data shard: tensor {key!r} fails its checksum") from None
            raise CheckpointError(where, f"cannot read tensor {key!r}: {message}") from None

    def files(self) -> list[str]:
        return [self.index, *self.shards]

    def pieces(self, key: str, verify_checksums: bool = False) -> Iterator[np.ndarray]:
        """The values of `key`. A float tensor is read straight from its shard at the offset the index gives, in
        chunks of _CHUNK elements into one reused buffer (constant memory, no checksum); otherwise, or with
        `verify_checksums`, the whole tensor through TF's reader, which checks the tensor's CRC32C."""
        entry = self.entries.get(key) if self.entries is not None and not verify_checksums else None
        dtype = self.dtypes[key]
        itemsize = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}.get(dtype)
        count = int(np.prod(self.shapes[key], dtype=np.int64))
        if entry is None or itemsize is None or entry.size != count * itemsize:
            yield np.asarray(self.read(key))
            return
        np_dtype = _np_dtype(dtype)
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


def _read_buffer() -> np.ndarray:
    if not hasattr(_local, "read"):
        _local.read = np.empty(_READ_BYTES, np.uint8)
    return _local.read


def _nbytes(dtype: str, shape) -> int | None:
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


# --------------------------------------------------------------------------------------------------------------------
# HDF5 (Keras 2 .h5, Keras 3 .weights.h5) and .keras archives


class _ZipMember(io.RawIOBase):
    """A stored (uncompressed) zip member as a seekable read-only file, for h5py, without extracting it."""

    def __init__(self, path: str, info: zipfile.ZipInfo):
        super().__init__()
        self._file = open(path, "rb")  # noqa: SIM115 - open for the reader's lifetime, closed by it
        self._file.seek(info.header_offset)
        header = self._file.read(30)
        if header[:4] != b"PK\x03\x04":
            self._file.close()
            raise CheckpointError(path, f"corrupt zip archive: bad local header for {info.filename}")
        name_len = int.from_bytes(header[26:28], "little")
        extra_len = int.from_bytes(header[28:30], "little")
        self._start = info.header_offset + 30 + name_len + extra_len
        self._size = info.file_size
        self._pos = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, offset, whence=0):
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer):
        n = max(0, min(len(buffer), self._size - self._pos))
        if n == 0:
            return 0
        self._file.seek(self._start + self._pos)
        got = self._file.readinto(memoryview(buffer)[:n])
        self._pos += got
        return got

    def close(self):
        self._file.close()
        super().close()


KERAS_WEIGHTS_MEMBER = "model.weights.h5"


@contextlib.contextmanager
def _open_h5(located: Located):
    """Yields an open h5py.File of the weights (the file itself, or the .keras archive's weights member)."""
    h5py = _h5py()
    cleanup: list[Callable[[], None]] = []
    try:
        if located.kind == "keras":
            try:
                archive = zipfile.ZipFile(located.target)
                cleanup.append(archive.close)
                check_archive(archive, located.target)
                info = archive.getinfo(KERAS_WEIGHTS_MEMBER)
            except KeyError:
                raise CheckpointError(
                    located.target,
                    f"not a Keras archive: no {KERAS_WEIGHTS_MEMBER} member (a sharded or non-Keras zip?)",
                ) from None
            except (zipfile.BadZipFile, OSError) as exc:
                raise CheckpointError(located.target, f"corrupt zip archive: {exc}") from None
            shown = f"{located.target}[{KERAS_WEIGHTS_MEMBER}]"
            if info.compress_type == zipfile.ZIP_STORED:
                source = _ZipMember(located.target, info)
                cleanup.append(source.close)
            else:  # compressed member: extract it to a temporary file (h5py needs cheap random access)
                handle = tempfile.NamedTemporaryFile(suffix=".weights.h5")  # noqa: SIM115 - open for the reader's lifetime, closed by it
                cleanup.append(handle.close)
                try:
                    _extract_weights(archive, info, handle, shown)
                except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                    raise CheckpointError(located.target, f"corrupt zip archive: {exc}") from None
                except OSError as exc:
                    raise CheckpointError(shown, f"cannot extract: {exc.strerror or exc}") from None
                source = handle.name
        else:
            source, shown = located.target, located.target
        try:
            handle = h5py.File(source, "r")
        except (OSError, ValueError) as exc:
            raise CheckpointError(shown, f"cannot open the HDF5 file: {_h5_message(exc)}") from None
        cleanup.append(handle.close)
        try:
            yield handle, shown
        except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:
            if not _raised_in_h5py(exc):
                raise
            # A damaged file can open and still fail on the first dataset or attribute read.
            raise CheckpointError(shown, f"corrupt HDF5 file: {_h5_message(exc)}") from None
    finally:
        for fn in reversed(cleanup):
            with contextlib.suppress(Exception):
                fn()


MAX_COMPRESSION_RATIO = 100  # real weights deflate to about 1.1:1; a member above this ratio is a zip bomb
_RATIO_FLOOR = 1 << 20  # small members (JSON) may compress well: the ratio counts from 1 MiB


def check_archive(archive: zipfile.ZipFile, path: str) -> None:
    """Refuse a .keras archive before anything is extracted or copied: member names that leave the archive's root
    (absolute, `..`, drive letters), and members that decompress to far more than they store (by the sizes the
    archive declares; extraction is capped at those sizes)."""
    for info in archive.infolist():
        name = info.filename
        parts = name.replace("\\", "/").split("/")
        if name.startswith(("/", "\\")) or ".." in parts or (len(name) > 1 and name[1] == ":"):
            raise CheckpointError(path, f"unsafe member name {name!r} in the archive (path traversal)")
        if info.file_size > _RATIO_FLOOR and info.file_size > MAX_COMPRESSION_RATIO * max(info.compress_size, 1):
            ratio = info.file_size / max(info.compress_size, 1)
            raise CheckpointError(
                path,
                f"member {name!r} would expand {info.compress_size:,} bytes to {info.file_size:,} "
                f"({ratio:,.0f}:1, more than {MAX_COMPRESSION_RATIO}:1): refusing a possible zip bomb",
            )


def _extract_weights(archive: zipfile.ZipFile, info: zipfile.ZipInfo, handle, shown: str) -> None:
    """Extract the weights member into `handle`: only after its first bytes show an HDF5 signature, only when the
    temporary folder has room for the size the archive declares, and never more than that size."""
    with archive.open(info) as member:
        head = member.read(4096 + 8)
        if not any(head[offset : offset + 8] == _HDF5_SIGNATURE for offset in (0, 512, 1024, 2048, 4096)):
            raise CheckpointError(shown, "not an HDF5 file (bad signature): the archive is corrupt or not Keras")
        free = shutil.disk_usage(os.path.dirname(handle.name)).free
        if info.file_size > free:
            raise CheckpointError(
                shown, f"needs {_size(info.file_size)} to extract, the temporary folder has {_size(free)} free"
            )
        handle.write(head)
        written = len(head)
        while chunk := member.read(1 << 20):
            written += len(chunk)
            if written > info.file_size:
                raise CheckpointError(shown, "the member is larger than the archive declares: corrupt archive")
            handle.write(chunk)
    handle.flush()


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _raised_in_h5py(exc: BaseException) -> bool:
    import traceback

    return any(f"h5py{os.sep}" in frame.f_code.co_filename for frame, _ in traceback.walk_tb(exc.__traceback__))


def _h5_message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = re.sub(r"^Unable to (open|synchronously open) file \((.*)\)$", r"\2", text)
    return text


def _h5_dtype(dataset) -> str:
    dtype = dataset.dtype
    if dtype.kind == "V" and dtype.itemsize == 2 and _attr_str(dataset.attrs.get("dtype")) == "bfloat16":
        return "bfloat16"
    if dtype.kind in ("S", "U", "O"):
        return "string"
    if dtype.kind == "V":
        return f"opaque{dtype.itemsize * 8}"
    return dtype.name


def _attr_str(value) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.bytes_):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _h5_layout(handle) -> str | None:
    import h5py

    if "layer_names" in handle.attrs:
        return "keras2-h5"
    group = handle.get("model_weights")
    if isinstance(group, h5py.Group) and "layer_names" in group.attrs:
        return "keras2-h5"
    datasets: list[str] = []
    handle.visititems(lambda name, obj: datasets.append(name) if isinstance(obj, h5py.Dataset) else None)
    tops = set(handle.keys())
    if ("vars" in tops or "layers" in tops) and all(re.search(r"(^|/)vars/\d+$", d) for d in datasets):
        return "keras3-weights-h5"
    return None


def _h5_datasets(handle) -> list[tuple[str, object]]:
    import h5py

    found: list[tuple[str, object]] = []
    handle.visititems(lambda name, obj: found.append((name, obj)) if isinstance(obj, h5py.Dataset) else None)
    return found


class _H5Source:
    def __init__(self, located: Located, handle, shown: str):
        self.located = located
        self.handle = handle
        self.shown = shown
        layout = _h5_layout(handle)
        if layout is None:
            raise CheckpointError(
                shown,
                "HDF5 file of unknown layout: not Keras 2 weights (no layer_names "
                "attribute) nor Keras 3 weights (datasets under .../vars/N)",
            )
        self.format = "keras3-archive" if located.kind == "keras" else layout
        self.layout = layout
        self.datasets = dict(_h5_datasets(handle))
        self.dtypes = {k: _h5_dtype(d) for k, d in self.datasets.items()}
        self.shapes = {k: [int(n) for n in (d.shape or ())] for k, d in self.datasets.items()}

    def keys(self) -> list[str]:
        return list(self.datasets)

    def name(self, key: str) -> str | None:
        """Keras 2: the weight name ("dense/kernel:0"), the dataset path below its layer group."""
        if self.layout != "keras2-h5":
            return None
        parts = key.split("/")
        if parts[0] == "model_weights":
            parts = parts[1:]
        elif parts[0] == "optimizer_weights":
            return "/".join(parts[1:])
        return "/".join(parts[1:]) if len(parts) > 1 else key

    def pieces(self, key: str) -> Iterator[np.ndarray]:
        """The dataset's values in row slabs of at most SLAB_BYTES (bfloat16 viewed as ml_dtypes.bfloat16)."""
        dataset = self.datasets[key]
        bf16 = self.dtypes[key] == "bfloat16"
        try:
            if dataset.shape is None:
                return
            if dataset.ndim == 0 or dataset.size * dataset.dtype.itemsize <= SLAB_BYTES:
                slabs = [()] if dataset.ndim == 0 else [slice(None)]
            else:
                row = max(1, dataset.size // dataset.shape[0]) * dataset.dtype.itemsize
                step = max(1, SLAB_BYTES // row)
                slabs = [slice(i, i + step) for i in range(0, dataset.shape[0], step)]
            for slab in slabs:
                value = np.asarray(dataset[slab])
                yield value.view(np.uint16).view(_bfloat16()) if bf16 else value
        except CheckpointError:
            raise
        except Exception as exc:
            raise CheckpointError(self.shown, f"cannot read dataset {key!r}: {_h5_message(exc)}") from None


# --------------------------------------------------------------------------------------------------------------------
# read_checkpoint


@contextlib.contextmanager
def open_source(path: str | os.PathLike):
    """Yields (located, source) for a checkpoint or weights file; source is a _TFSource or _H5Source."""
    located = locate(path)
    if located.kind == "savedmodel":
        raise CheckpointError(
            located.target, "is a SavedModel, not a checkpoint (its variables are the checkpoint variables/variables)"
        )
    if located.kind == "tf":
        yield located, _TFSource(located.target)
        return
    with _open_h5(located) as (handle, shown):
        yield located, _H5Source(located, handle, shown)


def _listed_keys(source) -> list[str]:
    """The keys a listing or an audit shows: no object graph, and a Keras export's mirrored variables once."""
    mirrors = getattr(source, "mirrors", set())
    return [k for k in source.keys() if k != OBJECT_GRAPH_KEY and k not in mirrors]


def _describe(located: Located, source) -> dict:
    variables = []
    counts: dict[str, int] = {}
    total = 0
    for key in _listed_keys(source):
        dtype, shape = source.dtypes[key], source.shapes[key]
        size = _nbytes(dtype, shape)
        entry = {
            "key": key,
            "dtype": dtype,
            "shape": shape,
            "object_path": source.object_paths.get(key) if isinstance(source, _TFSource) else None,
            "size_bytes": size,
        }
        if isinstance(source, _H5Source) and source.name(key):
            entry["name"] = source.name(key)
        variables.append(entry)
        counts[dtype] = counts.get(dtype, 0) + 1
        total += size or 0
    if isinstance(source, _TFSource):
        files = source.files()
    else:
        files = [located.target]
    return {
        "path": located.path,
        "format": source.format,
        "description": FORMAT_DESCRIPTIONS[source.format],
        "location": located.target,
        "files": files,
        "variables": variables,
        "dtypes": dict(sorted(counts.items())),
        "total_bytes": total,
        "mirrored": len(getattr(source, "mirrors", ())),  # Keras export `_all_variables/*`, not listed again
    }


def read_checkpoint(path: str | os.PathLike) -> dict:
    """Every variable of a checkpoint or weights file from its index/metadata, without reading tensor data.

    Returns {path, format, description, location, files, variables: [{key, dtype, shape, object_path, size_bytes}],
    dtypes: {dtype: count}, total_bytes}. `object_path` is set for TF2 object-based checkpoints only; Keras 2 .h5
    entries also carry `name`, the Keras weight name. Raises CheckpointError."""
    with open_source(path) as (located, source):
        return _describe(located, source)


# --------------------------------------------------------------------------------------------------------------------
# Range audit


_local = threading.local()


def _scratch() -> tuple[np.ndarray, np.ndarray]:
    """Per-thread chunk buffers of the audit kernel, allocated once (the kernel never allocates per chunk)."""
    if not hasattr(_local, "buf"):
        _local.buf = np.empty(_CHUNK, np.uint32)
        _local.mask = np.empty(_CHUNK, np.bool_)
    return _local.buf, _local.mask


class _RangeStats:
    """Accumulates the range audit of one variable over its pieces."""

    def __init__(self, target: str):
        self.target = target
        self.values = 0
        self.overflow = 0
        self.nonfinite = 0
        self.max_abs = 0.0
        self.zeros = 0
        self.flushed = 0
        self.subnormal = 0
        self.rel_sum = 0.0
        self.rel_max = 0.0
        self.rel_count = 0

    # -- float32 source, integer compares on the bit patterns of |x|: one write pass and three cheap reads per chunk
    def add_float32(self, array: np.ndarray) -> None:
        bits = np.ascontiguousarray(array).reshape(-1).view(np.uint32)
        self.values += bits.size
        over_bits, normal_bits, flush_bits = _BITS[self.target]
        buf, masks = _scratch()
        bf16 = self.target == "bfloat16"
        for start in range(0, bits.size, _CHUNK):
            chunk = bits[start : start + _CHUNK]
            n = chunk.size
            mag = buf[:n]
            mask = masks[:n]
            np.bitwise_and(chunk, 0x7FFFFFFF, out=mag)
            top = int(mag.max())
            if top > over_bits:  # rare: values beyond the target's range, or inf/NaN
                np.greater_equal(mag, _INF_BITS, out=mask)
                bad = int(np.count_nonzero(mask))
                self.nonfinite += bad
                finite = mag[~mask] if bad else mag
                self.overflow += int(np.count_nonzero(finite > over_bits))
                top = int(finite.max()) if finite.size else 0
            value = float(np.array([top], np.uint32).view(np.float32)[0])
            if value > self.max_abs:
                self.max_abs = value
            np.less(mag, normal_bits, out=mask)
            small = int(np.count_nonzero(mask))
            if small:
                tiny = mag[mask]
                zeros = int(np.count_nonzero(tiny == 0))
                flushed = int(np.count_nonzero(tiny < flush_bits)) - zeros if flush_bits else 0
                self.zeros += zeros
                self.flushed += flushed
                self.subnormal += small - zeros - flushed
            if bf16:
                self._add_relative(chunk.view(np.float32))

    def _add_relative(self, values: np.ndarray) -> None:
        """Relative error of rounding float32 `values` to bfloat16 (nonzero finite values only)."""
        rounded = values.astype(_bfloat16()).astype(np.float32)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            err = np.abs(values - rounded)
            np.divide(err, np.abs(values), out=err)
        keep = np.isfinite(err) & (values != 0)
        if not keep.all():
            err = err[keep]
        if err.size:
            self.rel_sum += float(err.sum(dtype=np.float64))
            self.rel_max = max(self.rel_max, float(err.max()))
            self.rel_count += err.size

    # -- any other float dtype (float64, float16, bfloat16): float64 arithmetic, thresholds from LIMITS
    def add_generic(self, array: np.ndarray) -> None:
        values = np.asarray(array).reshape(-1)
        maximum, normal, subnormal = LIMITS[self.target]
        for start in range(0, values.size, _CHUNK):
            chunk = values[start : start + _CHUNK].astype(np.float64)
            self.values += chunk.size
            mag = np.abs(chunk)
            finite = np.isfinite(mag)
            bad = int(chunk.size - np.count_nonzero(finite))
            self.nonfinite += bad
            if bad:
                mag = mag[finite]
            if mag.size:
                self.max_abs = max(self.max_abs, float(mag.max()))
            self.overflow += int(np.count_nonzero(mag > maximum))
            zeros = int(np.count_nonzero(mag == 0))
            below_sub = int(np.count_nonzero(mag < subnormal))
            below_normal = int(np.count_nonzero(mag < normal))
            self.zeros += zeros
            self.flushed += below_sub - zeros
            self.subnormal += below_normal - below_sub
            if self.target == "bfloat16":
                self._add_relative(chunk[finite].astype(np.float32) if bad else chunk.astype(np.float32))

    def add(self, array: np.ndarray) -> None:
        if array.dtype == np.float32:
            self.add_float32(array)
        else:
            self.add_generic(array)

    def result(self, threshold: float) -> dict:
        n = max(self.values, 1)
        out = {
            "values": self.values,
            "max_abs": self.max_abs,
            "overflow": self.overflow,
            "overflow_fraction": self.overflow / n,
            "flushed": self.flushed,
            "flushed_fraction": self.flushed / n,
            "subnormal": self.subnormal,
            "subnormal_fraction": self.subnormal / n,
            "nonfinite": self.nonfinite,
            "zeros": self.zeros,
        }
        if self.target == "bfloat16":
            out["max_relative_error"] = self.rel_max
            out["mean_relative_error"] = self.rel_sum / self.rel_count if self.rel_count else 0.0
        if self.nonfinite:
            status = "nonfinite"
        elif self.overflow:
            status = "overflow"
        elif (self.flushed + self.subnormal) / n > threshold:
            status = "underflow"
        else:
            status = "ok"
        out["status"] = status
        return out


def _auditable(dtype: str, target: str) -> bool:
    return dtype in FLOAT_DTYPES and dtype != target


def _compile_only(only: str | None):
    if only is None:
        return None
    try:
        return re.compile(only)
    except re.error as exc:
        raise CheckpointError("--only", f"invalid regular expression {only!r}: {exc}") from None


def _check_target(target_dtype: str) -> str:
    name = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(
        target_dtype, target_dtype
    )
    if name not in TARGET_DTYPES:
        raise CheckpointError("--dtype", f"unsupported target dtype {target_dtype!r} (float16, bfloat16, float32)")
    return name


def audit_checkpoint(
    path: str | os.PathLike,
    target_dtype: str = "float16",
    *,
    underflow_threshold: float = DEFAULT_UNDERFLOW_THRESHOLD,
    only: str | None = None,
    verify_checksums: bool = False,
) -> dict:
    """Range audit of every float variable whose dtype differs from `target_dtype`, streaming one tensor at a time.

    Returns {path, format, target_dtype, underflow_threshold, variables: [{key, dtype, shape, object_path, values,
    max_abs, overflow, flushed, subnormal, nonfinite, zeros, *_fraction, status, (bfloat16:) max_relative_error,
    mean_relative_error}], skipped, summary, safe, verdict, bytes_read, seconds}. status is ok | overflow |
    underflow | nonfinite.

    TF checkpoints: float tensors are read from the shards at the offsets of the index, 1 MiB at a time (the memory
    used does not grow with the checkpoint or its tensors); `verify_checksums=True` reads each tensor whole through
    TF's CheckpointReader instead, which also checks its CRC32C. Raises CheckpointError."""
    target = _check_target(target_dtype)
    pattern = _compile_only(only)
    with open_source(path) as (located, source):
        return _audit_source(located, source, target, underflow_threshold, pattern, verify_checksums)


def _audit_source(
    located: Located, source, target: str, threshold: float, pattern, verify_checksums: bool = False
) -> dict:
    started = time.perf_counter()
    rows = []
    read = 0
    keys = _listed_keys(source)
    selected = [k for k in keys if _auditable(source.dtypes[k], target) and (pattern is None or pattern.search(k))]
    skipped = len(keys) - len(selected)
    for key in selected:
        pieces = source.pieces(key, verify_checksums) if isinstance(source, _TFSource) else source.pieces(key)
        stats = _RangeStats(target)
        for piece in pieces:
            read += piece.nbytes
            stats.add(piece)
            del piece
        pieces = None
        row = {
            "key": key,
            "dtype": source.dtypes[key],
            "shape": source.shapes[key],
            "object_path": source.object_paths.get(key) if isinstance(source, _TFSource) else None,
        }
        row.update(stats.result(threshold))
        rows.append(row)
    result = {
        "path": located.path,
        "format": source.format,
        "target_dtype": target,
        "underflow_threshold": threshold,
        "variables": rows,
        "skipped": skipped,
        "bytes_read": read,
        "seconds": time.perf_counter() - started,
    }
    result.update(_summarise(rows, target, threshold))
    return result


def audit_arrays(
    path: str,
    fmt: str,
    arrays: dict[str, np.ndarray],
    target_dtype: str = "float16",
    *,
    underflow_threshold: float = DEFAULT_UNDERFLOW_THRESHOLD,
) -> dict:
    """The range audit of `audit_checkpoint` (same schema) of values already in memory: the arrays a script read
    from a file itself (`np.load`, `CheckpointReader.get_tensor`, h5py) to assign them into variables."""
    target = _check_target(target_dtype)
    started = time.perf_counter()
    rows = []
    for key, array in arrays.items():
        dtype = np.asarray(array).dtype.name
        if not _auditable(dtype, target):
            continue
        stats = _RangeStats(target)
        stats.add(np.asarray(array))
        row = {"key": key, "dtype": dtype, "shape": list(np.shape(array)), "object_path": None}
        row.update(stats.result(underflow_threshold))
        rows.append(row)
    result = {
        "path": path,
        "format": fmt,
        "target_dtype": target,
        "underflow_threshold": underflow_threshold,
        "variables": rows,
        "skipped": len(arrays) - len(rows),
        "bytes_read": 0,
        "seconds": time.perf_counter() - started,
    }
    result.update(_summarise(rows, target, underflow_threshold))
    return result


def _summarise(rows: list[dict], target: str, threshold: float) -> dict:
    values = sum(r["values"] for r in rows)
    summary = {
        "variables": len(rows),
        "values": values,
        "overflow_variables": sum(1 for r in rows if r["overflow"]),
        "overflow_values": sum(r["overflow"] for r in rows),
        "underflow_variables": sum(1 for r in rows if r["status"] == "underflow"),
        "nonfinite_variables": sum(1 for r in rows if r["nonfinite"]),
        "flushed_values": sum(r["flushed"] for r in rows),
        "subnormal_values": sum(r["subnormal"] for r in rows),
        "max_abs": max((r["max_abs"] for r in rows), default=0.0),
    }
    if target == "bfloat16":
        counted = [r for r in rows if r["values"]]
        summary["max_relative_error"] = max((r["max_relative_error"] for r in counted), default=0.0)
        weights = sum(r["values"] for r in counted)
        summary["mean_relative_error"] = (
            sum(r["mean_relative_error"] * r["values"] for r in counted) / weights if weights else 0.0
        )
    safe = not (summary["overflow_variables"] or summary["underflow_variables"] or summary["nonfinite_variables"])
    return {"summary": summary, "safe": safe, "verdict": _verdict(summary, target, threshold, safe)}


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _verdict(s: dict, target: str, threshold: float, safe: bool) -> str:
    if not s["variables"]:
        return f"nothing to audit: no float variable would be cast to {target}"
    limit = {"float16": "65504", "bfloat16": "3.39e38", "float32": "3.40e38"}[target]
    if not safe:
        problems = []
        if s["overflow_variables"]:
            problems.append(
                f"{_plural(s['overflow_variables'], 'variable')} overflow "
                f"({_plural(s['overflow_values'], 'value')} above {limit} become inf)"
            )
        if s["underflow_variables"]:
            problems.append(
                f"{_plural(s['underflow_variables'], 'variable')} underflow (more than "
                f"{threshold:.2%} of their values flush to zero or become subnormal)"
            )
        if s["nonfinite_variables"]:
            problems.append(f"{_plural(s['nonfinite_variables'], 'variable')} already hold inf/NaN")
        return f"NOT safe for {target}: " + "; ".join(problems)
    lost = s["flushed_values"] + s["subnormal_values"]
    text = (
        f"safe for {target}: {_plural(s['variables'], 'variable')}, no value overflows; "
        f"{lost:,} of {s['values']:,} values ({lost / max(s['values'], 1):.3%}) flush to zero or become subnormal"
    )
    if target == "bfloat16":
        text += f"; relative precision loss max {s['max_relative_error']:.3%}, mean {s['mean_relative_error']:.3%}"
    return text


# --------------------------------------------------------------------------------------------------------------------
# Conversion


def _fingerprint(value) -> tuple:
    if isinstance(value, (bytes, bytearray)):
        return ("bytes", zlib.adler32(value))
    array = np.asarray(value)
    if array.dtype.kind in ("O", "S", "U"):
        digest = 1
        for item in array.reshape(-1):
            digest = zlib.adler32(item if isinstance(item, bytes) else str(item).encode(), digest)
        return (str(array.dtype), tuple(array.shape), digest)
    array = np.ascontiguousarray(array)
    return (array.dtype.itemsize, tuple(array.shape), zlib.adler32(array.reshape(-1).view(np.uint8)))


def _cast(array: np.ndarray, target: np.dtype) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(array).astype(target)


def _saturated(array: np.ndarray, target: str) -> tuple[np.ndarray, int]:
    """(`array` with its finite values clamped to +-the target's max, how many were clamped). inf and NaN already
    in the checkpoint stay as they are. Computed in float32/float64 (bfloat16 cannot hold 65504 exactly)."""
    values = np.asarray(array)
    if values.dtype not in (np.float32, np.float64):
        values = values.astype(np.float32)
    maximum = LIMITS[target][0]
    with np.errstate(invalid="ignore"):
        beyond = np.isfinite(values) & (np.abs(values) > maximum)
    count = int(np.count_nonzero(beyond))
    if not count:
        return array, 0
    clamped = values.copy()
    clamped[beyond] = np.copysign(maximum, values[beyond])
    return clamped, count


def _became_inf(source: np.ndarray, cast: np.ndarray) -> int:
    """How many finite values of `source` are inf in `cast`."""
    with np.errstate(invalid="ignore"):
        return int(np.count_nonzero(np.isinf(np.asarray(cast, np.float32)) & np.isfinite(np.asarray(source))))


def _out_paths_tf(prefix: str) -> list[str]:
    found = [prefix + ".index"] if os.path.exists(prefix + ".index") else []
    return found + sorted(glob.glob(glob.escape(prefix) + ".data-*"))


def _same_prefix(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


@dataclass
class _Plan:
    located: Located
    out: str  # the output path as given
    out_target: str  # prefix (tf), file (h5/keras) or directory (tf from a directory)
    existed: bool
    overflow: str = "allow"  # OVERFLOW_MODES
    clamped: int = 0  # values clamped to the target's max (overflow="saturate")
    became_inf: dict[str, int] | None = None  # key -> finite values that the cast made inf


def _plan_output(located: Located, fmt: str, out: str, force: bool) -> _Plan:
    out = os.fspath(out)
    if located.kind == "tf":
        if located.from_dir:
            if os.path.exists(out) and not os.path.isdir(out):
                raise CheckpointError(
                    out, "exists and is not a directory (the input is a checkpoint directory, so the output is one too)"
                )
            if os.path.isdir(out) and os.path.realpath(out) == os.path.realpath(located.path):
                raise CheckpointError(out, "is the input directory: the input is never modified")
            existed = os.path.isdir(out)
            if existed and os.path.realpath(located.target).startswith(os.path.realpath(out) + os.sep):
                raise CheckpointError(out, "holds the input checkpoint: the input is never modified")
            target = out
        else:
            if out.endswith(".index"):
                out = out[: -len(".index")]
            if os.path.isdir(out):
                raise CheckpointError(
                    out,
                    "is a directory: give a checkpoint prefix such as "
                    f"{os.path.join(out, os.path.basename(located.target))}",
                )
            if _same_prefix(out, located.target):
                raise CheckpointError(out, "is the input checkpoint: the input is never modified")
            existed = bool(_out_paths_tf(out)) or os.path.exists(out)
            target = out
    else:
        required = {
            "keras2-h5": (".h5", ".hdf5"),
            "keras3-weights-h5": (".weights.h5",),
            "keras3-archive": (".keras",),
        }[fmt]
        if not out.endswith(required):
            raise CheckpointError(
                out,
                f"a {FORMAT_DESCRIPTIONS[fmt]} file must end in {' or '.join(required)} "
                "(Keras picks the reader from the suffix)",
            )
        if os.path.isdir(out):
            raise CheckpointError(out, "is a directory")
        if os.path.exists(out) and os.path.samefile(out, located.target):
            raise CheckpointError(out, "is the input file: the input is never modified")
        existed = os.path.exists(out)
        target = out
    if existed and not force:
        raise CheckpointError(out, "already exists (pass --force to overwrite it)")
    parent = os.path.dirname(os.path.abspath(target))
    existing = parent  # missing folders are created when the output is written: the nearest one that exists
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise CheckpointError(out, f"cannot write: {existing} is not a directory")
    if not os.access(existing, os.W_OK):
        raise CheckpointError(out, f"cannot write: directory {existing} is not writable")
    return _Plan(located, out, target, existed)


def _make_parents(target: str) -> list[str]:
    """Create the missing folders above `target`; returns them, deepest first (removed again on failure)."""
    created = []
    parent = os.path.dirname(os.path.abspath(target))
    while not os.path.exists(parent):
        created.append(parent)
        parent = os.path.dirname(parent)
    for directory in reversed(created):
        os.mkdir(directory)
    return created


def _remove_empty(directories: list[str]) -> None:
    for directory in directories:
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def convert_checkpoint(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    target_dtype: str,
    *,
    only: str | None = None,
    force: bool = False,
    require_match: bool = False,
    underflow_threshold: float = DEFAULT_UNDERFLOW_THRESHOLD,
    overflow: str = "allow",
) -> dict:
    """Write a copy of checkpoint `src` at `dst` in the same format with its float tensors cast to `target_dtype`.

    Non-float entries (integers, strings, the object graph) are copied untouched; `only` (a regular expression
    searched in each key) restricts the cast to matching float entries. `src` is never modified; an existing `dst`
    is refused unless `force`. The output is written to a temporary location beside `dst`, read back and checked
    (keys, dtypes, shapes and a checksum of every tensor), then moved into place. Streams one tensor at a time.

    Values beyond the target's range (`overflow`): "allow" writes them as inf, "saturate" clamps them to +-the
    target's max, "refuse" writes nothing and raises WouldOverflow naming the variables. Folders missing above
    `dst` are created.

    Returns {path, output, format, target_dtype, cast: [keys], copied: n, files, bytes_in, bytes_out, seconds,
    verified, audit, clamped, became_inf} where audit is the range audit of the cast entries. Raises
    CheckpointError; nothing is left at `dst` on error. With `require_match`, an `only` that selects nothing is an
    error."""
    target = _check_target(target_dtype)
    pattern = _compile_only(only)
    if overflow not in OVERFLOW_MODES:
        raise ValueError(f"overflow must be one of {OVERFLOW_MODES}, not {overflow!r}")
    with open_source(src) as (located, source):
        plan = _plan_output(located, source.format, dst, force)
        plan.overflow = overflow
        if isinstance(source, _H5Source) and source.layout == "keras2-h5" and target == "bfloat16":
            raise CheckpointError(
                os.fspath(dst),
                "Keras 2 .h5 files cannot hold bfloat16 weights (tf_keras reads "
                "them as numpy arrays; it casts .h5 weights on load anyway)",
            )
        started = time.perf_counter()
        selected = [
            k
            for k in source.keys()
            if k != OBJECT_GRAPH_KEY and _auditable(source.dtypes[k], target) and (pattern is None or pattern.search(k))
        ]
        if require_match and pattern is not None and not selected:
            raise CheckpointError(
                "--only",
                f"{only!r} matches no float entry to cast to {target} (keys look like "
                f"{next(iter(k for k in source.keys() if k != OBJECT_GRAPH_KEY), 'nothing')!r})",
            )
        notes = []
        if isinstance(source, _TFSource) and os.path.isfile(source.prefix + ".meta"):
            notes.append(
                f"{source.prefix}.meta (the TF1 graph) was not copied: it describes the original variables' dtypes"
            )
        created = _make_parents(plan.out_target)
        try:
            if isinstance(source, _TFSource):
                with _quiet_stderr():  # TF's C++ logs ("oneDNN supports DT_HALF only on ..."); errors are exceptions
                    result = _convert_tf(plan, source, target, set(selected), threshold=underflow_threshold)
            else:
                result = _convert_h5(plan, source, target, set(selected), threshold=underflow_threshold)
        except BaseException:
            _remove_empty(created)
            raise
    result.update(
        {
            "path": located.path,
            "output": plan.out,
            "format": source.format,
            "target_dtype": target,
            "cast": selected,
            "seconds": time.perf_counter() - started,
            "verified": True,
            "overwrote": plan.existed,
            "notes": notes,
            "clamped": plan.clamped,
            "became_inf": plan.became_inf or {},
        }
    )
    return result


def _cast_one(plan: _Plan, key: str, array, target: str, cast):
    """`cast(array)` of one selected tensor, after clamping (overflow="saturate"); counts what became inf."""
    if plan.overflow == "saturate":
        array, clamped = _saturated(array, target)
        plan.clamped += clamped
    result = cast(array)
    became = _became_inf(array, result)
    if became:
        plan.became_inf = plan.became_inf or {}
        plan.became_inf[key] = plan.became_inf.get(key, 0) + became
    return result


def _refuse_overflow(plan: _Plan, target: str) -> None:
    """Before anything is published: overflow="refuse" and the cast made finite values inf."""
    if plan.overflow == "refuse" and plan.became_inf:
        raise WouldOverflow(plan.out, target, plan.became_inf)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def _convert_tf(plan: _Plan, source: _TFSource, target: str, selected: set[str], threshold: float) -> dict:
    tf = _tf_eager()
    out_tf_dtype = tf.as_dtype(target)
    final_dir = plan.out_target if plan.located.from_dir else os.path.dirname(os.path.abspath(plan.out_target))
    base = os.path.basename(source.prefix) if plan.located.from_dir else os.path.basename(plan.out_target)
    with writes.staging_directory(plan.out_target) as workdir:
        staged = os.path.join(workdir, base)
        expected: dict[str, tuple] = {}
        rows = []
        parts: list[str] = []
        batch_names: list[str] = []
        batch_values: list = []
        batch_bytes = 0
        bytes_in = 0

        def flush():
            nonlocal batch_names, batch_values, batch_bytes
            if not batch_names:
                return
            part = os.path.join(workdir, f"part-{len(parts):05d}")
            try:
                tf.raw_ops.SaveV2(
                    prefix=part,
                    tensor_names=batch_names,
                    shape_and_slices=[""] * len(batch_names),
                    tensors=batch_values,
                )
            except Exception as exc:
                raise CheckpointError(plan.out, f"cannot write: {_tf_message(exc)}") from None
            parts.append(part)
            batch_names, batch_values, batch_bytes = [], [], 0

        for key in source.keys():
            value = source.read(key)
            bytes_in += value.nbytes if isinstance(value, np.ndarray) else len(value) if isinstance(value, bytes) else 0
            if key in selected:
                stats = _RangeStats(target)
                stats.add(value)
                row = {
                    "key": key,
                    "dtype": source.dtypes[key],
                    "shape": source.shapes[key],
                    "object_path": source.object_paths.get(key),
                }
                row.update(stats.result(threshold))
                rows.append(row)
                # TF's cast: round to nearest even like numpy's astype, vectorised; the tensor goes to SaveV2 as is
                tensor = _cast_one(plan, key, value, target, lambda array: tf.cast(array, out_tf_dtype))
                value = tensor.numpy()
            elif isinstance(value, bytes):
                tensor = tf.constant(value, dtype=tf.string)
            else:
                tensor = value
            expected[key] = (_out_dtype_name(source.dtypes[key], key in selected, target), _fingerprint(value))
            size = value.nbytes if isinstance(value, np.ndarray) else len(value) if isinstance(value, bytes) else 0
            if batch_names and batch_bytes + size > _BATCH_BYTES:
                flush()
            batch_names.append(key)
            batch_values.append(tensor)
            batch_bytes += size
            del value, tensor
        flush()
        if not parts:  # an empty checkpoint still needs an index and a data shard
            tf.raw_ops.SaveV2(
                prefix=os.path.join(workdir, "part-00000"), tensor_names=[], shape_and_slices=[], tensors=[]
            )
            parts.append(os.path.join(workdir, "part-00000"))
        try:
            tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=parts, destination_prefix=staged, delete_old_dirs=False)
        except Exception as exc:
            raise CheckpointError(plan.out, f"cannot write: {_tf_message(exc)}") from None
        _verify_tf(staged, expected, source.shapes, plan.out)
        _refuse_overflow(plan, target)
        produced = sorted(os.listdir(workdir))
        bytes_out = sum(os.path.getsize(os.path.join(workdir, f)) for f in produced)
        if plan.located.from_dir:
            with open(os.path.join(workdir, "checkpoint"), "w", encoding="utf-8") as handle:
                handle.write(f'model_checkpoint_path: "{base}"\nall_model_checkpoint_paths: "{base}"\n')
            files = [os.path.join(final_dir, f) for f in sorted(os.listdir(workdir))]
            for name in os.listdir(workdir):
                os.chmod(os.path.join(workdir, name), writes.new_file_mode())
            _commit_dir(workdir, plan.out_target)
        else:
            files = _commit_prefix(workdir, base, plan.out_target)
    audit = {
        "path": plan.located.path,
        "format": source.format,
        "target_dtype": target,
        "underflow_threshold": threshold,
        "variables": rows,
        "skipped": len(source.keys()) - len(rows) - (1 if source.object_based else 0),
    }
    audit.update(_summarise(rows, target, threshold))
    return {
        "files": files,
        "bytes_in": bytes_in,
        "bytes_out": bytes_out,
        "copied": len(expected) - len(rows),
        "audit": audit,
    }


def _out_dtype_name(dtype: str, cast: bool, target: str) -> str:
    return target if cast else dtype


def _verify_tf(prefix: str, expected: dict[str, tuple], shapes: dict, shown: str) -> None:
    tf = _tf()
    try:
        reader = tf.train.load_checkpoint(prefix)
        dtypes = {k: v.name for k, v in reader.get_variable_to_dtype_map().items()}
        out_shapes = reader.get_variable_to_shape_map()
    except Exception as exc:
        raise CheckpointError(
            shown, f"verification failed: cannot read the written checkpoint: {_tf_message(exc)}"
        ) from None
    if set(dtypes) != set(expected):
        raise CheckpointError(shown, "verification failed: the written checkpoint has different keys")
    for key, (dtype, fingerprint) in expected.items():
        if dtypes[key] != dtype or [int(d) for d in out_shapes[key]] != shapes[key]:
            raise CheckpointError(
                shown,
                f"verification failed: {key!r} was written as {dtypes[key]} "
                f"{list(out_shapes[key])}, expected {dtype} {shapes[key]}",
            )
        try:
            value = reader.get_tensor(key)
        except Exception as exc:
            raise CheckpointError(shown, f"verification failed: cannot read back {key!r}: {_tf_message(exc)}") from None
        if _fingerprint(value) != fingerprint:
            raise CheckpointError(shown, f"verification failed: {key!r} reads back different values")
        del value


def _commit_prefix(workdir: str, base: str, out_prefix: str) -> list[str]:
    """Move the staged checkpoint `workdir/base.*` to `out_prefix.*`: data shards first, the index last (a
    checkpoint is visible only through its index). An old checkpoint at `out_prefix` (--force) loses its index first,
    so no reader ever pairs an old index with new data."""
    old = _out_paths_tf(out_prefix)
    if os.path.exists(out_prefix + ".index"):
        os.unlink(out_prefix + ".index")
    staged = sorted(f for f in os.listdir(workdir) if f.startswith(base + "."))
    data = [f for f in staged if not f.endswith(".index")]
    moved = []
    for name in data + [base + ".index"]:
        destination = out_prefix + name[len(base) :]
        writes.publish(os.path.join(workdir, name), destination)
        moved.append(destination)
    for stale in old:
        if stale not in moved:
            _remove(stale)
    return [moved[-1], *moved[:-1]]


def _commit_dir(workdir: str, out_dir: str) -> None:
    for name in os.listdir(workdir):
        writes.fsync_file(os.path.join(workdir, name))
    if os.path.isdir(out_dir):  # --force: the old directory moves aside, the new one takes its name, the old goes
        parent = os.path.dirname(os.path.abspath(out_dir))
        trash = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.old-", dir=parent)
        os.rmdir(trash)
        os.rename(out_dir, trash)
        writes.publish_directory(workdir, out_dir)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        writes.publish_directory(workdir, out_dir)


def _copy_attrs(src, dst, drop: tuple[str, ...] = ()) -> None:
    for name in src.attrs:
        if name in drop:
            continue
        try:
            dtype = src.attrs.get_id(name).dtype
            dst.attrs.create(name, src.attrs[name], dtype=dtype)
        except Exception:
            dst.attrs[name] = src.attrs[name]


def _write_h5(plan: _Plan, source: _H5Source, out_path: str, target: str, selected: set[str], threshold: float):
    h5py = _h5py()
    out_dtype = _np_dtype(target)
    rows = []
    expected: dict[str, tuple] = {}
    with h5py.File(out_path, "w") as out:
        _copy_attrs(source.handle, out)

        def visit(name, obj):
            if isinstance(obj, h5py.Group):
                group = out.require_group(name)
                _copy_attrs(obj, group)
                return None
            parent = out.require_group(os.path.dirname(name)) if os.path.dirname(name) else out
            leaf = os.path.basename(name)
            if name not in selected:
                source.handle.copy(obj, parent, name=leaf)
                expected[name] = (source.dtypes[name], None)
                return None
            stats = _RangeStats(target)
            created = parent.create_dataset(
                leaf,
                shape=obj.shape,
                dtype=out_dtype,
                chunks=obj.chunks,
                compression=obj.compression,
                compression_opts=obj.compression_opts,
            )
            _copy_attrs(obj, created, drop=("dtype",))
            if target == "bfloat16":
                created.attrs["dtype"] = "bfloat16"
            offset = 0
            digest = 1
            for piece in source.pieces(name):
                stats.add(piece)
                cast = np.ascontiguousarray(_cast_one(plan, name, piece, target, lambda a: _cast(a, out_dtype)))
                if obj.ndim == 0:
                    created[()] = cast
                else:
                    created[offset : offset + cast.shape[0]] = cast
                    offset += cast.shape[0]
                digest = zlib.adler32(cast.reshape(-1).view(np.uint8), digest)
            row = {"key": name, "dtype": source.dtypes[name], "shape": source.shapes[name], "object_path": None}
            row.update(stats.result(threshold))
            rows.append(row)
            expected[name] = (target, digest)
            return None

        source.handle.visititems(visit)
    return rows, expected


def _verify_h5(path: str, source: _H5Source, expected: dict[str, tuple], shown: str, member: bool) -> None:
    located = Located("keras" if member else "h5", path, path)
    try:
        with _open_h5(located) as (handle, _):
            written = _H5Source(located, handle, shown)
            if set(written.datasets) != set(expected):
                raise CheckpointError(shown, "verification failed: the written file has different datasets")
            for key, (dtype, digest) in expected.items():
                if written.dtypes[key] != dtype or written.shapes[key] != source.shapes[key]:
                    raise CheckpointError(
                        shown,
                        f"verification failed: {key!r} was written as "
                        f"{written.dtypes[key]} {written.shapes[key]}, expected {dtype}",
                    )
                if digest is None:
                    continue
                check = 1
                for piece in written.pieces(key):
                    check = zlib.adler32(np.ascontiguousarray(piece).reshape(-1).view(np.uint8), check)
                if check != digest:
                    raise CheckpointError(shown, f"verification failed: {key!r} reads back different values")
    except CheckpointError as exc:
        if exc.problem.startswith("verification failed"):
            raise
        raise CheckpointError(shown, f"verification failed: {exc.problem}") from None


def _convert_h5(plan: _Plan, source: _H5Source, target: str, selected: set[str], threshold: float) -> dict:
    out = plan.out_target
    parent = os.path.dirname(os.path.abspath(out))
    weights = None
    try:
        with writes.staged_file(out) as staged:
            if plan.located.kind == "keras":
                fd, weights = tempfile.mkstemp(prefix=f".{os.path.basename(out)}.weights-", suffix=".h5", dir=parent)
                os.close(fd)
                rows, expected = _write_h5(plan, source, weights, target, selected, threshold)
                _verify_h5(weights, source, expected, plan.out, member=False)
                _write_archive(plan.located.target, staged, weights)
                _verify_h5(staged, source, expected, plan.out, member=True)
            else:
                rows, expected = _write_h5(plan, source, staged, target, selected, threshold)
                _verify_h5(staged, source, expected, plan.out, member=False)
            _refuse_overflow(plan, target)
            bytes_out = os.path.getsize(staged)
    except CheckpointError:
        raise
    except (OSError, RuntimeError, ValueError, TypeError) as exc:
        raise CheckpointError(plan.out, f"cannot write: {_h5_message(exc)}") from None
    finally:
        if weights is not None:
            with contextlib.suppress(OSError):
                os.unlink(weights)
    audit = {
        "path": plan.located.path,
        "format": source.format,
        "target_dtype": target,
        "underflow_threshold": threshold,
        "variables": rows,
        "skipped": len(source.datasets) - len(rows),
    }
    audit.update(_summarise(rows, target, threshold))
    return {
        "files": [out],
        "bytes_in": os.path.getsize(plan.located.target),
        "bytes_out": bytes_out,
        "copied": len(source.datasets) - len(rows),
        "audit": audit,
    }


def _write_archive(src_archive: str, out_archive: str, weights_file: str) -> None:
    """Copy the .keras zip member by member, replacing model.weights.h5 by `weights_file` (same compression)."""
    with zipfile.ZipFile(src_archive) as zin, zipfile.ZipFile(out_archive, "w", allowZip64=True) as zout:
        for info in zin.infolist():
            clone = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            clone.compress_type = info.compress_type
            clone.external_attr = info.external_attr
            if info.filename == KERAS_WEIGHTS_MEMBER:
                clone.file_size = os.path.getsize(weights_file)
                with open(weights_file, "rb") as reader, zout.open(clone, "w", force_zip64=True) as writer:
                    shutil.copyfileobj(reader, writer, 1 << 20)
            else:
                with zin.open(info) as reader, zout.open(clone, "w", force_zip64=info.file_size > 1 << 30) as writer:
                    shutil.copyfileobj(reader, writer, 1 << 20)
