"""Where the trace child was when a fatal signal killed it (issue 31): a native library imported next to TensorFlow
(torch) can crash the process with SIGSEGV, which no `except` sees. faulthandler writes the Python stack of that
moment to a file of the run's own; the parent reads it to name the library being imported (mpdoctor.trace.failures)
instead of an MP001 error without a cause."""

from __future__ import annotations

import faulthandler
from typing import TextIO

_open: list[TextIO] = []  # the log stays open for the life of the process: faulthandler writes to its descriptor


def enable(path: str | None) -> None:
    if not path:
        return
    try:
        handle = open(path, "w", encoding="utf-8")  # noqa: SIM115 (open for the life of the process)
    except OSError:
        return
    _open.append(handle)
    faulthandler.enable(file=handle, all_threads=False)
