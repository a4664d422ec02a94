"""Finding what a path names: a TF checkpoint prefix (through its index, a data shard, its directory or the
directory's `checkpoint` state file), an HDF5 or .keras weights file, or a SavedModel directory."""

from __future__ import annotations

import glob
import os
import re
import zipfile
from dataclasses import dataclass

from mpdoctor.artifacts.errors import CheckpointError


@dataclass(frozen=True)
class Located:
    kind: str  # "tf" | "h5" | "keras" | "savedmodel"
    path: str  # as given
    target: str  # the checkpoint prefix (tf), the file (h5, keras) or the directory (savedmodel)
    from_dir: bool = False  # a TF checkpoint found through its directory (`checkpoint` state file)


DATA_SHARD_RE = re.compile(r"\.data-(\d{5})-of-(\d{5})$")
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _is_hdf5(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            for offset in (0, 512, 1024, 2048, 4096):  # HDF5 allows a user block of 512 * 2**n bytes
                handle.seek(offset)
                if handle.read(8) == HDF5_SIGNATURE:
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
        match = DATA_SHARD_RE.search(base)
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
