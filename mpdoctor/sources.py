"""The text of the files mpdoctor checks: read once by the engine (Python files in their declared encoding,
notebooks as one program of their code cells) and kept in the report, so that renderers, fingerprints and fixes
work from what was analysed and never open a user's file again."""

from __future__ import annotations

import codecs
import contextlib
import io
import tokenize
from pathlib import Path

from mpdoctor.diagnostics import SourceText
from mpdoctor.notebook import is_notebook, read_notebook
from mpdoctor.reads import read_bytes


def read_source(path: Path | str) -> str:
    """A Python file's text, decoded as its coding cookie (or BOM) says."""
    return decode_source(read_bytes(path))  # regular files only: a FIFO or device is an OSError, never a hang


def decode_source(data: bytes) -> str:
    """Python source bytes decoded as their coding cookie (or BOM) says. Raises UnicodeDecodeError, or SyntaxError
    for a bad coding cookie."""
    if not data.startswith(codecs.BOM_UTF8) and b"coding" not in data[: _first_two_lines(data)]:
        with contextlib.suppress(UnicodeDecodeError):  # then tokenize says what is wrong, as it always has
            return data.decode("utf-8")  # what detect_encoding says of such a file (without its cost per file)
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def _first_two_lines(data: bytes) -> int:
    """Where the two lines that may hold a coding cookie end (PEP 263)."""
    first = data.find(b"\n")
    if first < 0:
        return len(data)
    second = data.find(b"\n", first + 1)
    return len(data) if second < 0 else second


def read_checked(path: Path) -> SourceText:
    """The text the checks analyse. Raises OSError, UnicodeDecodeError, SyntaxError (a bad coding cookie) or
    NotebookError."""
    if is_notebook(path):
        notebook = read_notebook(path)
        return SourceText(Path(path), notebook.source, notebook.cell_lines)
    return SourceText(Path(path), read_source(path))
