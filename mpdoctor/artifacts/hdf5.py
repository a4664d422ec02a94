"""HDF5 weights (Keras 2 `.h5`, Keras 3 `.weights.h5`) and Keras 3 `.keras` archives, whose weights are the
`model.weights.h5` member: dtypes and shapes from the HDF5 metadata, values in row slabs of at most `SLAB_BYTES`.

An archive is checked before anything is extracted (member names, compression ratio); a stored member is read in
place, a compressed one extracted to a temporary file.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator

import numpy as np

from mpdoctor.artifacts.backends import bfloat16_dtype, load_h5py
from mpdoctor.artifacts.errors import CheckpointError
from mpdoctor.artifacts.locate import HDF5_SIGNATURE, Located

SLAB_BYTES = 16 << 20  # HDF5 datasets are read and written in row slabs of at most this size


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
def open_h5(located: Located):
    """Yields an open h5py.File of the weights (the file itself, or the .keras archive's weights member)."""
    h5py = load_h5py()
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
            raise CheckpointError(shown, f"cannot open the HDF5 file: {h5_message(exc)}") from None
        cleanup.append(handle.close)
        try:
            yield handle, shown
        except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:
            if not _raised_in_h5py(exc):
                raise
            # A damaged file can open and still fail on the first dataset or attribute read.
            raise CheckpointError(shown, f"corrupt HDF5 file: {h5_message(exc)}") from None
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
        if not any(head[offset : offset + 8] == HDF5_SIGNATURE for offset in (0, 512, 1024, 2048, 4096)):
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


def h5_message(exc: BaseException) -> str:
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


class H5Source:
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

    def all_keys(self) -> list[str]:
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
                yield value.view(np.uint16).view(bfloat16_dtype()) if bf16 else value
        except CheckpointError:
            raise
        except Exception as exc:
            raise CheckpointError(self.shown, f"cannot read dataset {key!r}: {h5_message(exc)}") from None
