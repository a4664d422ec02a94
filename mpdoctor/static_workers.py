"""The static pass in worker processes (`--jobs N` without the trace), the way flake8 --jobs and pylint -j do it.

Threads do not help here (the static pass is Python code: they would share the GIL). The parent forks its workers
once it has imported everything, read every file and built each file's arguments, so a worker imports nothing,
reads nothing and is sent nothing but chunk numbers: the work (a function and its argument tuples) is inherited
through fork. The files are cut into contiguous chunks of about equal size (deterministic: from the files' order
and sizes), dealt to whichever worker is free; each chunk's results come back pickled and are yielded in the
files' order, so what the caller builds from them is the same as with one process.

A worker checks files and nothing else: whatever a check changes in the worker's memory stays there, so the
function must return everything the parent needs (the engine's per-file result carries the file's target).

Workers ignore Ctrl-C, SIGTERM and SIGHUP: those reach the whole process group, and the parent decides (it kills
its workers and reaps them before the exception propagates, so the exit code is the signal's). A worker also ends
when the parent dies (Linux: the parent-death signal; elsewhere when its pipe closes). A worker that dies is a
`WorkerDied` error in the parent, never a hang.

POSIX with `os.fork` only, and not on macOS, whose system libraries are not safe to use in a forked child (as for
the trace's fork server); nor from a process that runs other threads (a Jupyter kernel): there, one process.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence

# Below this much source text one process is as quick: forking the workers and sending the results back cost about
# what the second core saves. Measured on 2 cores (bench/static.py `break_even_rows`): the break-even lies near
# 40,000 characters of bench/_synthetic.py's models (dense with findings) and near 100,000 of Keras's own source.
MIN_PARALLEL_CHARACTERS = 100_000
# Chunks dealt to whichever worker is free even out files of unequal cost. They shrink as the work runs out (guided
# self-scheduling: a quarter of what is left per worker, down to a 64th of the whole per worker), so the workers
# finish together: with equal chunks of a 16th, one worker idled for half a chunk at the end on average.
_SHARE_OF_REMAINING = 4
_SMALLEST_SHARE = 64
_PR_SET_PDEATHSIG = 1
# Ctrl-C, SIGTERM and SIGHUP reach the whole process group: the parent handles them, its workers ignore them.
_PARENTS_SIGNALS = frozenset(
    s for s in (signal.SIGINT, getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None
)


class WorkerDied(RuntimeError):
    """A worker process ended without sending its chunk's results (killed, out of memory, a crash in C code)."""


def fork_problem() -> str | None:
    """Why the static pass cannot use forked workers here, or None."""
    if not hasattr(os, "fork"):
        return "fork is not available on this platform"
    if sys.platform == "darwin":
        return "fork is not safe on macOS"
    if threading.active_count() > 1:
        return "other threads run in this process"
    return None


def plan_workers(jobs: int, sizes: Sequence[int]) -> tuple[int, str | None]:
    """(worker processes to use, a note for --verbose or None) for files of these sizes; 1: in this process."""
    if jobs <= 1 or len(sizes) < 2 or sum(sizes) < MIN_PARALLEL_CHARACTERS:
        return 1, None  # little to check: one process is as quick, nothing worth a note
    problem = fork_problem()
    if problem is not None:
        return 1, f"static pass in one process: {problem}"
    workers = min(jobs, len(sizes))
    return workers, f"static pass in {workers} worker processes"


def chunks_of(sizes: Sequence[int], workers: int) -> list[range]:
    """Contiguous ranges of indices into `sizes`, about 1/(workers * _SHARE_OF_REMAINING) of what is left after the
    chunks before them, none below 1/(workers * _SMALLEST_SHARE) of the total unless the files run out; a file
    bigger than that is a chunk of its own."""
    remaining = sum(sizes)
    smallest = max(1, remaining // (workers * _SMALLEST_SHARE))
    chunks: list[range] = []
    start = filled = 0
    target = max(smallest, remaining // (workers * _SHARE_OF_REMAINING))
    for index, size in enumerate(sizes):
        if filled and filled + size > target:
            chunks.append(range(start, index))
            remaining -= filled
            start, filled = index, 0
            target = max(smallest, remaining // (workers * _SHARE_OF_REMAINING))
        filled += size
    if start < len(sizes):
        chunks.append(range(start, len(sizes)))
    return chunks


def results_in_order(
    function: Callable, arguments: Sequence[tuple], sizes: Sequence[int], workers: int, names: Sequence[str] = ()
) -> Iterator:
    """`function(*a)` for each tuple of `arguments`, yielded in their order, computed by `workers` forked worker
    processes (`sizes`: the work each tuple stands for, to cut even chunks; `names`: what to call each in an
    error). Every worker is ended and reaped when the generator finishes, fails or is closed (Ctrl-C, Terminated).
    Raises WorkerDied, or the exception a worker's `function` raised (as the same type when it can be pickled)."""
    from multiprocessing.connection import wait

    chunks = chunks_of(sizes, workers)
    pool = _Pool(function, arguments, chunks, min(workers, len(chunks)), names)
    try:
        pending = iter(range(len(chunks)))
        busy: dict[object, tuple[_Worker, int]] = {}  # connection -> its worker and the chunk it is checking

        def deal(worker: _Worker) -> None:
            number = next(pending, None)
            if number is not None:
                pool.send(worker, number, chunks[number])
                busy[worker.connection] = (worker, number)

        for worker in pool.workers:
            deal(worker)
        done: dict[int, list] = {}
        next_chunk = 0
        while next_chunk < len(chunks):
            for connection in wait(list(busy)):
                worker, number = busy.pop(connection)
                reply = pool.receive(worker, chunks[number])
                deal(worker)  # before unpickling the reply: the worker need not wait for that
                done[number] = pool.results(reply)
            while next_chunk in done:
                yield from done.pop(next_chunk)
                next_chunk += 1
    finally:
        pool.end()


class _Worker:
    def __init__(self, pid: int, connection) -> None:
        self.pid = pid
        self.connection = connection


class _Pool:
    def __init__(
        self, function: Callable, arguments: Sequence[tuple], chunks: list[range], count: int, names: Sequence[str]
    ) -> None:
        from multiprocessing.connection import Pipe

        self.names = names
        self.workers: list[_Worker] = []
        for stream in (sys.stdout, sys.stderr):  # nothing buffered before the fork may be written twice
            with contextlib.suppress(Exception):
                stream.flush()
        parent = os.getpid()
        try:
            for _ in range(count):
                ours, theirs = Pipe()
                # A signal between the fork and the worker's own handlers would run the parent's handler in the
                # worker (KeyboardInterrupt unwinding the parent's stack there): blocked until they are set.
                mask = signal.pthread_sigmask(signal.SIG_BLOCK, _PARENTS_SIGNALS)
                try:
                    pid = os.fork()
                    if pid == 0:  # the worker: never returns
                        try:
                            ours.close()
                            for other in self.workers:  # the other workers' pipes are the parent's business
                                other.connection.close()
                            _serve(theirs, function, arguments, chunks, parent, mask)
                        finally:
                            os._exit(1)
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                theirs.close()
                self.workers.append(_Worker(pid, ours))
        except BaseException:
            self.end()
            raise

    def send(self, worker: _Worker, number: int, chunk: range) -> None:
        try:
            worker.connection.send_bytes(number.to_bytes(4, "big"))
        except OSError:  # its end of the pipe is closed: it died
            raise self._died(worker, chunk) from None

    def receive(self, worker: _Worker, chunk: range) -> bytes:
        try:
            return worker.connection.recv_bytes()
        except (EOFError, OSError):
            raise self._died(worker, chunk) from None

    @staticmethod
    def results(reply: bytes) -> list:
        ok, payload = pickle.loads(reply)
        if not ok:
            raise _rebuilt(*payload)
        return payload

    def _died(self, worker: _Worker, chunk: range) -> WorkerDied:
        where = f"file {chunk.start + 1}" if len(chunk) == 1 else f"one of files {chunk.start + 1}-{chunk.stop}"
        if self.names:
            first, last = self.names[chunk.start], self.names[chunk.stop - 1]
            where += f" ({first})" if len(chunk) == 1 else f" ({first} to {last})"
        return WorkerDied(f"a static worker process ({how_it_ended(worker.pid)}) died while checking {where}")

    def end(self) -> None:
        """Kill and reap every worker (they hold nothing to clean up: they only compute)."""
        for worker in self.workers:
            with contextlib.suppress(OSError):
                os.kill(worker.pid, signal.SIGKILL)
        for worker in self.workers:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(worker.pid, 0)
            worker.connection.close()
        self.workers = []


def how_it_ended(pid: int) -> str:
    """`pid 123, killed by SIGKILL` / `pid 123, exit code 1`, from its exit status (reaped here)."""
    try:
        _pid, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return f"pid {pid}"
    if os.WIFSIGNALED(status):
        return f"pid {pid}, killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"pid {pid}, exit code {os.waitstatus_to_exitcode(status)}"


def _serve(connection, function: Callable, arguments: Sequence[tuple], chunks: list[range], parent: int, mask) -> None:
    """The worker's loop: a chunk number in, its results (or the exception) out, until the parent says nothing
    more or is gone. Leaves by os._exit: the parent's atexit handlers and buffers are not the worker's."""
    code = 1
    try:
        for signum in _PARENTS_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _die_with_parent(parent)
        gc.freeze()  # what the parent built is shared copy-on-write: keep the collector off its pages
        while True:
            try:
                message = connection.recv_bytes()
            except EOFError:  # the parent closed its end: no more work
                break
            chunk = chunks[int.from_bytes(message, "big")]
            try:
                reply = pickle.dumps((True, [function(*arguments[i]) for i in chunk]), pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # the parent raises it: one line and exit 2, as in one process
                reply = _pickled_failure(exc)
            connection.send_bytes(reply)
        code = 0
    except BaseException:  # the parent went away: leave quietly
        pass
    finally:
        os._exit(code)


def _pickled_failure(exc: Exception) -> bytes:
    """The exception, and its type name and message for an exception that does not survive pickling."""
    try:
        blob = pickle.dumps(exc, pickle.HIGHEST_PROTOCOL)
    except Exception:
        blob = None
    return pickle.dumps((False, (type(exc).__name__, str(exc), blob)), pickle.HIGHEST_PROTOCOL)


def _rebuilt(name: str, message: str, blob: bytes | None) -> Exception:
    """A worker's exception in the parent: the same type where it can be rebuilt, else its name and message (what
    the CLI prints of an internal error either way)."""
    with contextlib.suppress(Exception):
        if blob is not None:
            return pickle.loads(blob)
    return RuntimeError(f"{name}: {message}")


def _die_with_parent(parent: int) -> None:
    """Linux: the kernel kills this worker when the parent dies (even by SIGKILL), mid-file included."""
    if sys.platform.startswith("linux"):
        import ctypes  # here, in each worker at once, not in the parent's start-up

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the call took effect
        os._exit(1)
