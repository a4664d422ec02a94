"""`convert-checkpoint`: a copy of a checkpoint or weights file in the same format, its float tensors cast.

The converter reads one tensor at a time (through TF's reader for TF checkpoints, checksums checked), writes TF
checkpoints in batches of at most `_BATCH_BYTES` (one data shard each, merged by MergeV2Checkpoints), so its peak
memory is about the largest tensor plus a constant. The output is staged beside its destination, read back and
verified, then moved into place; the input is never modified.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import tempfile
import time
import zipfile
import zlib
from dataclasses import dataclass

import numpy as np

from mpdoctor import writes
from mpdoctor.artifacts.backends import (
    eager_tensorflow,
    load_h5py,
    load_tensorflow,
    numpy_dtype,
    quiet_stderr,
    tf_message,
)
from mpdoctor.artifacts.errors import CheckpointError
from mpdoctor.artifacts.hdf5 import KERAS_WEIGHTS_MEMBER, H5Source, h5_message, open_h5
from mpdoctor.artifacts.locate import Located
from mpdoctor.artifacts.range_audit import (
    DEFAULT_UNDERFLOW_THRESHOLD,
    LIMIT_TEXT,
    LIMITS,
    RangeStats,
    audit_of,
    auditable,
    check_target,
    compile_only,
)
from mpdoctor.artifacts.sources import FORMAT_DESCRIPTIONS, open_source
from mpdoctor.artifacts.tf_checkpoint import OBJECT_GRAPH_KEY, TFSource
from mpdoctor.facts.artifacts import Conversion

OVERFLOW_MODES = ("refuse", "saturate", "allow")  # convert_checkpoint: values beyond the target's range
_BATCH_BYTES = 64 << 20  # the TF converter saves this many bytes per SaveV2 call (one data shard each)


class WouldOverflow(CheckpointError):
    """convert_checkpoint(overflow="refuse"): the cast turns finite values into inf; nothing was written.
    `variables`: {key: how many of its values would become inf}."""

    def __init__(self, path: str, target: str, variables: dict[str, int]):
        total = sum(variables.values())
        names = ", ".join(repr(k) for k in list(variables)[:5]) + (", ..." if len(variables) > 5 else "")
        limit = LIMIT_TEXT[target]
        super().__init__(
            path,
            f"not written: {total:,} value{'' if total == 1 else 's'} of {len(variables)} "
            f"variable{'' if len(variables) == 1 else 's'} would become inf in {target} ({names}); "
            f"--saturate clamps them to +-{limit}, --allow-inf keeps inf",
        )
        self.variables = variables


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
) -> Conversion:
    """Write a copy of checkpoint `src` at `dst` in the same format with its float tensors cast to `target_dtype`.

    Non-float entries (integers, strings, the object graph) are copied untouched; `only` (a regular expression
    searched in each key) restricts the cast to matching float entries. `src` is never modified; an existing `dst`
    is refused unless `force`. The output is written to a temporary location beside `dst`, read back and checked
    (keys, dtypes, shapes and a checksum of every tensor), then moved into place. Streams one tensor at a time.

    Values beyond the target's range (`overflow`): "allow" writes them as inf, "saturate" clamps them to +-the
    target's max, "refuse" writes nothing and raises WouldOverflow naming the variables. Folders missing above
    `dst` are created.

    Returns the Conversion: the files written, the keys cast, how many entries were copied, the range audit of the
    cast entries, the values clamped or made inf. Raises
    CheckpointError; nothing is left at `dst` on error. With `require_match`, an `only` that selects nothing is an
    error."""
    target = check_target(target_dtype)
    pattern = compile_only(only)
    if overflow not in OVERFLOW_MODES:
        raise ValueError(f"overflow must be one of {OVERFLOW_MODES}, not {overflow!r}")
    with open_source(src) as (located, source):
        plan = _plan_output(located, source.format, dst, force)
        plan.overflow = overflow
        if isinstance(source, H5Source) and source.layout == "keras2-h5" and target == "bfloat16":
            raise CheckpointError(
                os.fspath(dst),
                "Keras 2 .h5 files cannot hold bfloat16 weights (tf_keras reads "
                "them as numpy arrays; it casts .h5 weights on load anyway)",
            )
        started = time.perf_counter()
        selected = [
            k
            for k in source.all_keys()
            if k != OBJECT_GRAPH_KEY and auditable(source.dtypes[k], target) and (pattern is None or pattern.search(k))
        ]
        if require_match and pattern is not None and not selected:
            raise CheckpointError(
                "--only",
                f"{only!r} matches no float entry to cast to {target} (keys look like "
                f"{next(iter(k for k in source.all_keys() if k != OBJECT_GRAPH_KEY), 'nothing')!r})",
            )
        notes = []
        if isinstance(source, TFSource) and os.path.isfile(source.prefix + ".meta"):
            notes.append(
                f"{source.prefix}.meta (the TF1 graph) was not copied: it describes the original variables' dtypes"
            )
        created = _make_parents(plan.out_target)
        try:
            if isinstance(source, TFSource):
                with quiet_stderr():  # TF's C++ logs ("oneDNN supports DT_HALF only on ..."); errors are exceptions
                    result = _convert_tf(plan, source, target, set(selected), threshold=underflow_threshold)
            else:
                result = _convert_h5(plan, source, target, set(selected), threshold=underflow_threshold)
        except BaseException:
            _remove_empty(created)
            raise
    result.path = located.path
    result.output = plan.out
    result.format = source.format
    result.target_dtype = target
    result.cast = selected
    result.seconds = time.perf_counter() - started
    result.verified = True
    result.overwrote = plan.existed
    result.notes = notes
    result.clamped = plan.clamped
    result.became_inf = plan.became_inf or {}
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


def _convert_tf(plan: _Plan, source: TFSource, target: str, selected: set[str], threshold: float) -> Conversion:
    """Write and verify the cast TF checkpoint; returns what was written (the caller adds what was asked)."""
    tf = eager_tensorflow()
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
                raise CheckpointError(plan.out, f"cannot write: {tf_message(exc)}") from None
            parts.append(part)
            batch_names, batch_values, batch_bytes = [], [], 0

        for key in source.all_keys():
            value = source.read(key)
            bytes_in += value.nbytes if isinstance(value, np.ndarray) else len(value) if isinstance(value, bytes) else 0
            if key in selected:
                stats = RangeStats(target)
                stats.add(value)
                rows.append(
                    stats.row(key, source.dtypes[key], source.shapes[key], source.object_paths.get(key), threshold)
                )
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
            raise CheckpointError(plan.out, f"cannot write: {tf_message(exc)}") from None
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
    skipped = len(source.all_keys()) - len(rows) - (1 if source.object_based else 0)
    audit = audit_of(plan.located.path, source.format, target, threshold, rows, skipped)
    return Conversion(files, bytes_in, bytes_out, len(expected) - len(rows), audit)


def _out_dtype_name(dtype: str, cast: bool, target: str) -> str:
    return target if cast else dtype


def _verify_tf(prefix: str, expected: dict[str, tuple], shapes: dict, shown: str) -> None:
    tf = load_tensorflow()
    try:
        reader = tf.train.load_checkpoint(prefix)
        dtypes = {k: v.name for k, v in reader.get_variable_to_dtype_map().items()}
        out_shapes = reader.get_variable_to_shape_map()
    except Exception as exc:
        raise CheckpointError(
            shown, f"verification failed: cannot read the written checkpoint: {tf_message(exc)}"
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
            raise CheckpointError(shown, f"verification failed: cannot read back {key!r}: {tf_message(exc)}") from None
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


def _write_h5(plan: _Plan, source: H5Source, out_path: str, target: str, selected: set[str], threshold: float):
    h5py = load_h5py()
    out_dtype = numpy_dtype(target)
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
            stats = RangeStats(target)
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
            rows.append(stats.row(name, source.dtypes[name], source.shapes[name], None, threshold))
            expected[name] = (target, digest)
            return None

        source.handle.visititems(visit)
    return rows, expected


def _verify_h5(path: str, source: H5Source, expected: dict[str, tuple], shown: str, member: bool) -> None:
    located = Located("keras" if member else "h5", path, path)
    try:
        with open_h5(located) as (handle, _):
            written = H5Source(located, handle, shown)
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


def _convert_h5(plan: _Plan, source: H5Source, target: str, selected: set[str], threshold: float) -> Conversion:
    """Write and verify the cast HDF5 file or .keras archive; returns what was written."""
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
        raise CheckpointError(plan.out, f"cannot write: {h5_message(exc)}") from None
    finally:
        if weights is not None:
            with contextlib.suppress(OSError):
                os.unlink(weights)
    audit = audit_of(plan.located.path, source.format, target, threshold, rows, len(source.datasets) - len(rows))
    return Conversion([out], os.path.getsize(plan.located.target), bytes_out, len(source.datasets) - len(rows), audit)


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
