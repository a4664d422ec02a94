"""TF's tensor bundle index (the `.index` file of TF2 object-based and TF1 name-based checkpoints), read here.

The index is an uncompressed LevelDB-format table (tensorflow/core/lib/io) of BundleEntryProtos
(tensorflow/core/util/tensor_bundle): where each tensor's bytes are in the data shards. `bundle_index` gives those
offsets to the streaming audit; `check_bundle_index` refuses an index that would make TensorFlow's own reader abort
the process before it is handed over.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from mpdoctor.artifacts.errors import CheckpointError
from mpdoctor.artifacts.locate import locate

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


def table_entries(data: bytes) -> Iterator[tuple[bytes, bytes]]:
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
class BundleEntry:
    shard: int
    offset: int
    size: int


def bundle_index(index: str) -> tuple[int, dict[str, BundleEntry]] | None:
    """(num_shards, {key: where its bytes are}) from a tensor bundle index (tensorflow/core/util/tensor_bundle);
    None when it cannot be parsed here (big-endian data, a compressed block, ...): TF's own reader then has the
    last word. Sliced (partitioned) entries are left out."""
    try:
        from tensorflow.core.protobuf import tensor_bundle_pb2

        with open(index, "rb") as handle:
            data = handle.read()
        shards = 1
        entries: dict[str, BundleEntry] = {}
        for key, value in table_entries(data):
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
                entries[key.decode("utf-8", "surrogateescape")] = BundleEntry(entry.shard_id, entry.offset, entry.size)
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
    TFSource then finds in the data shard, or reports a truncated shard). Raises CheckpointError "corrupt
    checkpoint: ..." for a crafted or damaged index."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import tensor_bundle_pb2

    try:
        with open(index, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise CheckpointError(index, f"cannot read: {exc.strerror or exc}") from None
    try:
        rows = list(table_entries(data))
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
