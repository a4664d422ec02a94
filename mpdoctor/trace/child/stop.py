"""The trace asked to stop at its timeout (issue 14 item 7): the findings gathered before it are kept.

At the timeout the parent sends `STOP_SIGNAL` to the child (mpdoctor.trace.processes.ProcessTree.supervise) and
kills it only after a grace period. The child's handler, installed here (in the child: the fork server's children
start with the default action), notes where the user's code was (the innermost frame of the user's file on the main
thread's stack, the line that was running) and raises `TimedOut` in the main thread once. That ends the user's code
wherever it was (a `while True:` loop at module level, a builder, a custom training loop); the child then analyses
the models built so far from their layer graphs alone (no call: the call may be what took the time) and writes its
facts with `facts.timeout` saying where time ran out.

`TimedOut` is a BaseException: the user's `except Exception:` does not swallow it, and neither do the hooks'
`own_code` blocks. The child's own `except BaseException` blocks that would record it as the model's error check
`is_timeout` first.
"""

from __future__ import annotations

import os
import signal

from mpdoctor.facts.schema import STOP_SIGNAL, SourceRef, TimeoutRecord


class TimedOut(BaseException):
    """The parent's timeout: raised in the main thread by the stop signal's handler."""


_state: dict = {"record": None, "phase": "prepare"}


def install(user_file: str | None) -> None:
    """Handle the stop signal from now on (main thread only, as Python's signal handlers are)."""

    def stop(_signum, frame):
        if _state["record"] is not None:  # once: the analysis that follows must run to its end
            return
        _state["record"] = TimeoutRecord(phase=_state["phase"], location=user_line(frame, user_file))
        raise TimedOut("the trace ran out of time")

    signal.signal(STOP_SIGNAL, stop)


def enter(phase: str) -> None:
    """What the child is doing now (`prepare` | `import` | `build` | `analysis`), for the record of a timeout."""
    _state["phase"] = phase


def requested() -> TimeoutRecord | None:
    """The timeout's record once the parent asked to stop, else None."""
    return _state["record"]


def is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, TimedOut)


def user_line(frame, user_file: str | None) -> SourceRef | None:
    """The innermost frame of the user's file on the stack that `frame` (the interrupted one) ends."""
    while frame is not None and user_file is not None:
        filename = frame.f_code.co_filename
        if filename == user_file or os.path.realpath(filename) == user_file:
            return SourceRef(user_file, frame.f_lineno)
        frame = frame.f_back
    return None
