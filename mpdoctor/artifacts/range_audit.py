"""The float16/bfloat16 range audit of a checkpoint's float variables (MP302/MP303, `mpdoctor inspect --dtype`).

Thresholds (the contract of MP302/MP303 in docs/RULES.md), for a float16 target:
- overflow: finite |x| > 65504 (float16 max), reported with max |x| (finite values);
- flushed: 0 < |x| < 2**-24 (5.96e-8, the smallest float16 subnormal);
- subnormal: 2**-24 <= |x| < 2**-14 (6.10e-5, the smallest float16 normal); disjoint from flushed;
- nonfinite: inf/NaN already in the checkpoint.
For a bfloat16 target the same counts use bfloat16's limits, plus the relative precision loss of rounding each value
to bfloat16 (max and mean over the nonzero finite values).

The audit streams one tensor at a time, piece by piece (a TF tensor 1 MiB at a time from its data shard, an HDF5
dataset in row slabs), through a kernel that works in in-cache chunks of float32 bit patterns.
"""

from __future__ import annotations

import os
import re
import threading
import time

import numpy as np

from mpdoctor.artifacts.backends import bfloat16_dtype
from mpdoctor.artifacts.errors import CheckpointError
from mpdoctor.artifacts.locate import Located
from mpdoctor.artifacts.sources import listed_keys, open_source
from mpdoctor.artifacts.tf_checkpoint import TFSource
from mpdoctor.facts.artifacts import AuditRow, CheckpointAudit
from mpdoctor.facts.codec import ABSENT

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
TARGET_DTYPES = ("float16", "bfloat16", "float32")
DEFAULT_UNDERFLOW_THRESHOLD = 0.01  # MP303 warns when more than this fraction of a variable flushes or is subnormal

# (max finite, smallest normal, smallest subnormal) of each target dtype.
LIMITS = {
    "float16": (65504.0, 2.0**-14, 2.0**-24),
    "bfloat16": (3.3895313892515355e38, 2.0**-126, 2.0**-133),
    "float32": (3.4028234663852886e38, 2.0**-126, 2.0**-149),
}
LIMIT_TEXT = {"float16": "65504", "bfloat16": "3.39e38", "float32": "3.40e38"}
# The same thresholds as float32 bit patterns of |x| (sign bit cleared): the fast path compares integers.
_BITS = {
    "float16": (0x477FE000, 0x38800000, 0x33800000),
    "bfloat16": (0x7F7F0000, 0x00800000, 0x0),
    "float32": (0x7F7FFFFF, 0x00800000, 0x0),
}
_INF_BITS = 0x7F800000
_CHUNK = 1 << 18  # elements per in-cache chunk of the audit kernel (1 MiB of float32)

_local = threading.local()


def _scratch() -> tuple[np.ndarray, np.ndarray]:
    """Per-thread chunk buffers of the audit kernel, allocated once (the kernel never allocates per chunk)."""
    if not hasattr(_local, "buf"):
        _local.buf = np.empty(_CHUNK, np.uint32)
        _local.mask = np.empty(_CHUNK, np.bool_)
    return _local.buf, _local.mask


class RangeStats:
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
        rounded = values.astype(bfloat16_dtype()).astype(np.float32)
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

    def row(self, key: str, dtype: str, shape: list[int], object_path: str | None, threshold: float) -> AuditRow:
        """The audited variable: its counts, fractions and status (ok | overflow | underflow | nonfinite)."""
        n = max(self.values, 1)
        row = AuditRow(
            key,
            dtype,
            shape,
            object_path,
            values=self.values,
            max_abs=self.max_abs,
            overflow=self.overflow,
            overflow_fraction=self.overflow / n,
            flushed=self.flushed,
            flushed_fraction=self.flushed / n,
            subnormal=self.subnormal,
            subnormal_fraction=self.subnormal / n,
            nonfinite=self.nonfinite,
            zeros=self.zeros,
        )
        if self.target == "bfloat16":
            row.max_relative_error = self.rel_max
            row.mean_relative_error = self.rel_sum / self.rel_count if self.rel_count else 0.0
        if self.nonfinite:
            row.status = "nonfinite"
        elif self.overflow:
            row.status = "overflow"
        elif (self.flushed + self.subnormal) / n > threshold:
            row.status = "underflow"
        return row


def auditable(dtype: str, target: str) -> bool:
    return dtype in FLOAT_DTYPES and dtype != target


def compile_only(only: str | None):
    if only is None:
        return None
    try:
        return re.compile(only)
    except re.error as exc:
        raise CheckpointError("--only", f"invalid regular expression {only!r}: {exc}") from None


def check_target(target_dtype: str) -> str:
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
) -> CheckpointAudit:
    """Range audit of every float variable whose dtype differs from `target_dtype`, streaming one tensor at a time:
    a row per audited variable (counts, fractions, status ok | overflow | underflow | nonfinite, and for bfloat16
    the relative precision loss), the summary, whether it is safe and the verdict in words.

    TF checkpoints: float tensors are read from the shards at the offsets of the index, 1 MiB at a time (the memory
    used does not grow with the checkpoint or its tensors); `verify_checksums=True` reads each tensor whole through
    TF's CheckpointReader instead, which also checks its CRC32C. Raises CheckpointError."""
    target = check_target(target_dtype)
    pattern = compile_only(only)
    with open_source(path) as (located, source):
        return audit_source(located, source, target, underflow_threshold, pattern, verify_checksums)


def audit_source(
    located: Located, source, target: str, threshold: float, pattern, verify_checksums: bool = False
) -> CheckpointAudit:
    started = time.perf_counter()
    rows = []
    read = 0
    keys = listed_keys(source)
    selected = [k for k in keys if auditable(source.dtypes[k], target) and (pattern is None or pattern.search(k))]
    skipped = len(keys) - len(selected)
    for key in selected:
        pieces = source.pieces(key, verify_checksums) if isinstance(source, TFSource) else source.pieces(key)
        stats = RangeStats(target)
        for piece in pieces:
            read += piece.nbytes
            stats.add(piece)
            del piece
        pieces = None
        object_path = source.object_paths.get(key) if isinstance(source, TFSource) else None
        rows.append(stats.row(key, source.dtypes[key], source.shapes[key], object_path, threshold))
    seconds = time.perf_counter() - started
    return audit_of(located.path, source.format, target, threshold, rows, skipped, read, seconds)


def audit_arrays(
    path: str,
    fmt: str,
    arrays: dict[str, np.ndarray],
    target_dtype: str = "float16",
    *,
    underflow_threshold: float = DEFAULT_UNDERFLOW_THRESHOLD,
) -> CheckpointAudit:
    """The range audit of `audit_checkpoint` (same record) of values already in memory: the arrays a script read
    from a file itself (`np.load`, `CheckpointReader.get_tensor`, h5py) to assign them into variables."""
    target = check_target(target_dtype)
    started = time.perf_counter()
    rows = []
    for key, array in arrays.items():
        dtype = np.asarray(array).dtype.name
        if not auditable(dtype, target):
            continue
        stats = RangeStats(target)
        stats.add(np.asarray(array))
        rows.append(stats.row(key, dtype, list(np.shape(array)), None, underflow_threshold))
    seconds = time.perf_counter() - started
    return audit_of(path, fmt, target, underflow_threshold, rows, len(arrays) - len(rows), 0, seconds)


def audit_of(
    path: str,
    fmt: str,
    target: str,
    threshold: float,
    rows: list[AuditRow],
    skipped: int,
    bytes_read: int = ABSENT,
    seconds: float = ABSENT,
) -> CheckpointAudit:
    """The audit of `rows` with its summary and verdict. `bytes_read` and `seconds` stay ABSENT for a conversion's
    audit, whose reading and time are the conversion's own."""
    summary = _summary(rows, target)
    safe = not (summary["overflow_variables"] or summary["underflow_variables"] or summary["nonfinite_variables"])
    return CheckpointAudit(
        path,
        fmt,
        target,
        threshold,
        rows,
        skipped,
        bytes_read,
        seconds,
        summary,
        safe,
        _verdict(summary, target, threshold, safe),
    )


def _summary(rows: list[AuditRow], target: str) -> dict:
    summary = {
        "variables": len(rows),
        "values": sum(r.values for r in rows),
        "overflow_variables": sum(1 for r in rows if r.overflow),
        "overflow_values": sum(r.overflow for r in rows),
        "underflow_variables": sum(1 for r in rows if r.status == "underflow"),
        "nonfinite_variables": sum(1 for r in rows if r.nonfinite),
        "flushed_values": sum(r.flushed for r in rows),
        "subnormal_values": sum(r.subnormal for r in rows),
        "max_abs": max((r.max_abs for r in rows), default=0.0),
    }
    if target == "bfloat16":
        counted = [r for r in rows if r.values]
        summary["max_relative_error"] = max((r.max_relative_error for r in counted), default=0.0)
        weights = sum(r.values for r in counted)
        summary["mean_relative_error"] = (
            sum(r.mean_relative_error * r.values for r in counted) / weights if weights else 0.0
        )
    return summary


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _verdict(s: dict, target: str, threshold: float, safe: bool) -> str:
    if not s["variables"]:
        return f"nothing to audit: no float variable would be cast to {target}"
    limit = LIMIT_TEXT[target]
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
