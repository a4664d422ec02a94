"""A one-line `[3/12] path` progress indicator on stderr, only for a person at a terminal."""

from __future__ import annotations

import shutil
from typing import TextIO

from mpdoctor.printable import escape_controls


class Progress:
    """Called by the engine before each file; draws when there are several files or a (slow) trace run."""

    def __init__(self, stream: TextIO, tracing: bool) -> None:
        self.stream = stream
        self.tracing = tracing
        self.drawn = False

    @classmethod
    def for_stream(cls, stream: TextIO, tracing: bool) -> Progress | None:
        return cls(stream, tracing) if hasattr(stream, "isatty") and stream.isatty() else None

    def __call__(self, index: int, total: int, shown: str) -> None:
        if total < 2 and not self.tracing:
            return
        line = f"[{index}/{total}] {escape_controls(shown)}" + (" (trace)" if self.tracing else "")
        width = max(20, shutil.get_terminal_size((80, 24)).columns - 1)
        self.stream.write("\r\x1b[K" + line[:width])
        self.stream.flush()
        self.drawn = True

    def clear(self) -> None:
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.drawn = False
