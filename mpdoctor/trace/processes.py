"""Process management for the trace pass (parent side): start a child that runs user code, supervise it (timeout,
memory limit, a short grace period once its result is written), and end it together with everything it started,
also when mpdoctor itself is interrupted.

What user code may start and how it is found again (Linux):
- the child runs in a session and process group of its own; killing the group ends what stayed in it;
- processes that leave the group (`setsid`, `start_new_session=True`, a double fork) are found by walking
  /proc: descendants of the child by parent pid, members of its session, and processes carrying the child's
  token (an environment variable every descendant inherits unless it clears its environment);
- mpdoctor makes itself a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`), so a descendant whose parent died is
  re-parented to mpdoctor instead of init: it is still found (and reaped) after the rest of its tree is gone.
Elsewhere (macOS, the BSDs, Windows) only the child's process group is ended: see the README.

Signals: within mpdoctor.signals.signals_raise(), SIGTERM and SIGHUP raise `Terminated` in the main thread like
SIGINT raises KeyboardInterrupt, so every `finally` (ending the child tree, removing the trace's temporary folder)
runs before mpdoctor exits with 128 + the signal number.

Several trace children may run at once (parallel workers): each `ProcessTree` knows its own child, session and
token. One case cannot be attributed: a process that cleared its environment and was re-parented to mpdoctor
after its parent died; the tree that ends first claims it (such a process is ended early, never left behind).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

TOKEN_VARIABLE = "MPDOCTOR_TRACE_TOKEN"
GRACE_AFTER_RESULT = 2.0  # seconds a child may take to exit once its result is written (atexit, threads)
STOP_GRACE = (5.0, 30.0)  # seconds a child asked to stop at the timeout has to write what it has: 10% of the
# timeout within these bounds (a big model's graph takes longer to read on a loaded machine)
_POLL = 0.05  # seconds between checks of the child's exit, memory and result
_PR_SET_CHILD_SUBREAPER = 36
_PROC = "/proc"

_live_lock = threading.Lock()
_live: set[int] = set()  # pids of the children of live ProcessTrees: never claimed as another tree's orphan
# pids of mpdoctor's own helpers (the fork servers): children of mpdoctor that no tree may claim as an orphan of its
# model code, even when started after the tree's child (a server for another environment, started while a Keras 3
# file is traced beside a tf_keras one, was swept up and killed while it imported TensorFlow).
_own_helpers: set[int] = set()


def spare(pid: int) -> None:
    """Never end `pid` when a tree ends: it is mpdoctor's own helper process, not what a trace started."""
    with _live_lock:
        _own_helpers.add(pid)


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux): orphans among its descendants are re-parented to it, not to
    init, so the trace's cleanup still finds them. False where the call does not exist."""
    if not sys.platform.startswith("linux"):
        return False
    global _subreaper
    if _subreaper is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            _subreaper = False
    return _subreaper


_subreaper: bool | None = None


@dataclass
class Ending:
    """How a supervised child ended."""

    returncode: int | None
    failure: str | None  # why its result cannot be complete: timeout, memory limit, killed...
    after_result: bool = False  # ended by the parent after the grace period that followed its result


class ProcessTree:
    """A child process in a session of its own, and everything it starts. Use as a context manager: leaving the
    block (normally, by an exception, by Ctrl-C or Terminated) ends the whole tree."""

    def __init__(self, argv: list[str], *, env: dict, cwd: str | None = None, spawn=None, **popen) -> None:
        """`spawn(argv, env, cwd)`: starts the child some other way than Popen (the fork server, which gives it its
        own session too) and returns an object with Popen's pid, poll, wait, kill and returncode."""
        become_subreaper()
        self.token = secrets.token_hex(16)
        self._token_entry = f"{TOKEN_VARIABLE}={self.token}".encode()
        env = dict(env, **{TOKEN_VARIABLE: self.token})
        if spawn is not None:
            self.process = spawn(argv, env, cwd)
        else:
            self.process = subprocess.Popen(argv, env=env, cwd=cwd, start_new_session=True, **popen)
        self.pid = self.process.pid
        with _live_lock:
            _live.add(self.pid)
        self._started = _start_time(self.pid)

    def __enter__(self) -> ProcessTree:
        return self

    def __exit__(self, *exc) -> None:
        self.end()

    def supervise(
        self,
        timeout: float,
        memory_limit_mb: float | None = None,
        result_written: Callable[[], bool] | None = None,
        grace: float = GRACE_AFTER_RESULT,
        stop_signal: int | None = None,
        stop_grace: float | None = None,
    ) -> Ending:
        """Wait for the child. It is ended when the timeout passes, when its resident memory exceeds the limit,
        and `grace` seconds after `result_written()` first says its result is complete (threads or atexit
        handlers of the user's code that keep it alive must not cost the whole timeout). `stop_signal`: at the
        timeout the child is first sent this signal and given `stop_grace` seconds (default: 10% of the timeout
        within STOP_GRACE) to write what it gathered (mpdoctor.trace.child.stop) before it is ended."""
        deadline = time.monotonic() + timeout
        limit = int(memory_limit_mb * 2**20) if memory_limit_mb else None
        done_at = None
        while True:
            try:
                returncode = self.process.wait(timeout=_POLL)
            except subprocess.TimeoutExpired:
                pass
            else:
                return Ending(returncode, None)
            now = time.monotonic()
            if done_at is None and result_written is not None and result_written():
                done_at = now
            if done_at is not None and now - done_at >= grace:
                self.end()
                return Ending(self.process.returncode, None, after_result=True)
            if limit is not None and (resident_bytes(self.pid) or 0) > limit:
                self.end()
                return Ending(
                    self.process.returncode,
                    f"the model code exceeded the memory limit of {memory_limit_mb:g} MiB (--trace-memory)",
                )
            if now >= deadline:
                if stop_signal is not None:
                    if stop_grace is None:
                        stop_grace = min(max(timeout / 10, STOP_GRACE[0]), STOP_GRACE[1])
                    self._ask_to_stop(stop_signal, stop_grace)
                self.end()
                return Ending(
                    self.process.returncode, f"the model code did not finish within {timeout:g} s (--trace-timeout)"
                )

    def _ask_to_stop(self, signum: int, grace: float) -> None:
        """Send the child (itself only: what it started is ended with it) `signum` and wait up to `grace` seconds
        for it to exit."""
        try:
            os.kill(self.pid, signum)
        except OSError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=grace)

    def end(self) -> None:
        """Kill the child and every process it started (repeatedly, until a sweep finds none: a process may fork
        while it is being killed), then reap them."""
        try:
            for _ in range(50):
                found = self._members()
                alive = [pid for pid, state in found.items() if state != "Z"]
                if self.process.poll() is None:
                    alive.append(self.pid)
                if not alive:
                    break
                self._kill_group()
                for pid in alive:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                self._reap(found)
                time.sleep(0.01)
            self._reap(self._members())
            self.process.wait()
        finally:
            with _live_lock:
                _live.discard(self.pid)

    # ------------------------------------------------------------------------------------------------ internals

    def _kill_group(self) -> None:
        if hasattr(os, "killpg"):
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)
        elif self.process.poll() is None:
            self.process.kill()

    def _members(self) -> dict[int, str]:
        """{pid: state} of the processes this tree started (the child itself excluded), from /proc."""
        table = _process_table()
        if table is None:
            return {}
        me = os.getpid()
        members: set[int] = set()
        with _live_lock:
            others = (_live | _own_helpers) - {self.pid}
        for pid, (_state, ppid, session, started) in table.items():
            if pid == self.pid or pid == me or pid in others:
                continue
            if session == self.pid:  # still in the child's session
                members.add(pid)
            elif (
                self._started is not None
                and started is not None
                and started >= self._started
                and (self._carries_token(pid) or (ppid == me and not _token_of_another(pid, self._token_entry)))
            ):
                members.add(pid)  # left the session; or an orphan re-parented to this subreaper
        parents = {pid: ppid for pid, (_s, ppid, _se, _st) in table.items()}
        changed = True
        while changed:  # descendants by parent pid of the child and of what was found
            changed = False
            for pid, ppid in parents.items():
                if pid not in members and pid != me and (ppid == self.pid or ppid in members):
                    members.add(pid)
                    changed = True
        return {pid: table[pid][0] for pid in members}

    def _carries_token(self, pid: int) -> bool:
        return self._token_entry in _environ(pid)

    def _reap(self, found: dict[int, str]) -> None:
        """Collect the exit status of members that became children of this process (re-parented orphans)."""
        for pid in found:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)


def end_all() -> None:
    """Kill the process group of every live tree's child (parallel checks interrupted: the threads that own the
    trees then see their child gone and end the rest of their trees)."""
    with _live_lock:
        pids = list(_live)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def resident_bytes(pid: int) -> int | None:
    """The process's resident set size (Linux /proc; None elsewhere, where the memory limit is not enforced)."""
    try:
        with open(f"{_PROC}/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _process_table() -> dict[int, tuple[str, int, int, int | None]] | None:
    """{pid: (state, ppid, session, start time in clock ticks)} of every process, or None without /proc."""
    try:
        names = os.listdir(_PROC)
    except OSError:
        return None
    table = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{_PROC}/{name}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue  # exited meanwhile
        fields = data[data.rfind(b")") + 2 :].split()  # the command name may hold spaces and parentheses
        try:
            table[int(name)] = (fields[0].decode(), int(fields[1]), int(fields[3]), int(fields[19]))
        except (IndexError, ValueError):
            continue
    return table


def _start_time(pid: int) -> int | None:
    table_entry = None
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as handle:
            data = handle.read()
        table_entry = int(data[data.rfind(b")") + 2 :].split()[19])
    except (OSError, IndexError, ValueError):
        pass
    return table_entry


def _environ(pid: int) -> bytes:
    try:
        with open(f"{_PROC}/{pid}/environ", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _token_of_another(pid: int, own: bytes) -> bool:
    """The process carries the token of another trace (a parallel worker's), not this one's."""
    prefix = f"{TOKEN_VARIABLE}=".encode()
    return any(entry.startswith(prefix) and entry != own for entry in _environ(pid).split(b"\0"))
