"""SIGTERM and SIGHUP unwind mpdoctor like Ctrl-C: within `signals_raise()` they raise `Terminated` in the main
thread, so every `finally` (ending trace children and static workers, removing temporary folders) runs before
mpdoctor exits with 128 + the signal number. Standard library only, imported by every command (the trace's
process management, mpdoctor.trace.processes, is imported only by runs that trace).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived (raised in the main thread within `signals_raise`)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Terminated while the block runs, SIGINT KeyboardInterrupt as usual; after the first
    of them the others are ignored, so the cleanup it started runs to its end. Main thread only (elsewhere a
    no-op); the previous handlers come back afterwards."""
    wanted = [s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None]
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when the shell made us ignore it
        wanted.append(signal.SIGINT)

    def raise_once(signum, _frame):
        for s in wanted:  # one exception: a second signal must not interrupt the cleanup the first one started
            signal.signal(s, signal.SIG_IGN)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)

    previous = {}
    for s in wanted:
        previous[s] = signal.signal(s, raise_once)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
