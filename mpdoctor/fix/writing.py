"""The write of a fixed file: atomic, and only over the text that was analysed."""

from __future__ import annotations

import io
import os
import tokenize
from pathlib import Path

from mpdoctor import writes
from mpdoctor.reads import read_bytes


class StaleFile(Exception):
    """The file changed on disk since it was analysed."""


class ReadOnly(Exception):
    """The user cannot write the file (its permissions say so): --fix leaves it alone."""


def _decode(data: bytes) -> tuple[str, str]:
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding), encoding


def write_atomic(path: Path, analysed: str, new_text: str) -> None:
    """Replace the file's text by `new_text` if it still holds `analysed`, through mpdoctor.writes (temporary file,
    fsync, rename; mode, owner, group, extended attributes and hard links kept). On any failure the original is
    intact. A file the user may not write is refused (ReadOnly), even when the folder would allow the rename."""
    target = Path(os.path.realpath(path))  # a symlink keeps pointing at the fixed file
    data = read_bytes(target)
    current, encoding = _decode(data)
    if current != analysed:
        raise StaleFile(f"{path} changed since it was analysed; not touched (run mpdoctor again)")
    if not os.access(target, os.W_OK):
        raise ReadOnly("read-only: not fixed")
    try:
        writes.write_atomic(target, new_text.encode(encoding), expect=data)
    except writes.FileChanged:  # a last look right before the rename
        raise StaleFile(f"{path} changed since it was analysed; not touched (run mpdoctor again)") from None


def write_fixed(path: Path, analysed: str, fixed: str, shown: str) -> str | None:
    """`write_atomic`, and why it did not write (None when it did): the file changed since it was analysed, is
    read-only, or the write failed (`shown`: the file as the message names it)."""
    try:
        write_atomic(path, analysed, fixed)
    except (StaleFile, ReadOnly) as exc:
        return str(exc)
    except OSError as exc:
        return f"{shown}: cannot write: {exc.strerror or exc}; the original is unchanged"
    return None
