"""`mpdoctor check -`: the source read from stdin, as ruff and black take it from editors. `--stdin-filename PATH`
names it: the report calls it PATH, and its configuration and TensorFlow/Keras target are found from PATH. The
static pass checks the text read; the trace runs a file, so only when PATH is a file holding that very text (an
editor's unsaved buffer is never traced as the file on disk). With `--fix` the fixed source goes to stdout (ruff's
behaviour) and the report to stderr."""

from __future__ import annotations

import io
import os
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from mpdoctor.config import Config
    from mpdoctor.diagnostics import Report
    from mpdoctor.engine import TraceOptions

STDIN = "-"  # the path argument that means stdin, and the name of its source without --stdin-filename
STDIN_LIMIT = 64 * 2**20  # bytes of source read from stdin (a Python file beyond that is no editor buffer)


class StdinError(ValueError):
    """Stdin cannot be checked as asked (one line, exit 2)."""


@dataclass(frozen=True)
class StdinSource:
    data: bytes  # as read, for writing back unchanged
    text: str
    shown: str  # what the report calls it
    path: Path | None  # --stdin-filename
    on_disk: bool  # the file at `path` holds this very text: the trace may run it


def wanted(paths: list[Path], filename: Path | None) -> bool:
    """Whether the run reads its source from stdin: `-` is its one path, or --stdin-filename is given without one
    (as ruff). Raises StdinError when `-` comes with other paths or --stdin-filename with paths but no `-`."""
    dash = [p for p in paths if str(p) == STDIN]
    if dash and len(paths) > 1:
        raise StdinError("`-` (stdin) is checked alone: give no other path with it")
    if filename is not None and paths and not dash:
        raise StdinError("--stdin-filename names the source read from stdin: give `-` (or no path), not a path")
    return bool(dash) or filename is not None


def read_stdin(filename: Path | None, stream: BinaryIO | None = None) -> StdinSource:
    """The source on stdin (at most STDIN_LIMIT bytes), named after `filename`. Raises StdinError."""
    from mpdoctor.engine import display_path
    from mpdoctor.notebook import is_notebook
    from mpdoctor.sources import decode_source, read_source

    if filename is not None and is_notebook(filename):
        raise StdinError(f"{filename}: notebooks are not read from stdin; check the .ipynb file")
    stream = stream if stream is not None else sys.stdin.buffer
    data = stream.read(STDIN_LIMIT + 1)
    if len(data) > STDIN_LIMIT:
        raise StdinError(f"stdin: too large for a source file (more than {STDIN_LIMIT // 2**20} MiB)")
    try:
        text = decode_source(data)
    except (UnicodeDecodeError, SyntaxError) as exc:
        raise StdinError(f"stdin: cannot read source: {exc}") from None
    on_disk = False
    if filename is not None:
        try:
            on_disk = read_source(filename) == text
        except (OSError, UnicodeDecodeError, SyntaxError):
            on_disk = False  # no such file (a new buffer), or unreadable: nothing to trace
    shown = display_path(filename) if filename is not None else STDIN
    return StdinSource(data, text, shown, filename, on_disk)


def check_stdin(source: StdinSource, config: Config, trace: TraceOptions) -> Report:
    """The report of one file whose text is `source` (the trace as `trace` says: the caller enables it only for a
    source on disk)."""
    from mpdoctor.diagnostics import Report, SourceText
    from mpdoctor.engine import check_source

    report = Report(passes=("static", "trace") if trace.enabled else ("static",))
    path = source.path if source.path is not None else Path(source.shown)
    diagnostics, error = check_source(
        source.text,
        source.shown,
        config,
        path=os.fspath(path) if source.path is not None else None,
        trace=trace,
        traces=report.traces,
        targets=report.targets,
    )
    report.diagnostics = diagnostics
    report.sources[source.shown] = SourceText(path, source.text)
    report.files_checked = 0 if error is not None and error.kind == "syntax" else 1
    report.errors = [error] if error else []
    return report


def write_fixed(report: Report, source: StdinSource, stream: BinaryIO) -> None:
    """--fix of stdin: the fixed source on `stream` (the source as read when nothing was fixed); the report then
    counts the fixes as written and keeps the fixed text."""
    from dataclasses import replace

    fixed = next((r for r in report.fixes or () if r.shown == source.shown and r.changed), None)
    if fixed is None:
        stream.write(source.data)
    else:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source.data).readline)
        stream.write(fixed.fixed.encode(encoding))
        fixed.written = True
        report.sources[source.shown] = replace(report.sources[source.shown], text=fixed.fixed)
    stream.flush()
