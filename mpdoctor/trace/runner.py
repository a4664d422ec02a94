"""Parent side of the trace pass: run the child in its own process with a timeout and read its facts back.

A crash, hang, memory blow-up or `os._exit` of the child never takes mpdoctor down: it becomes a TraceOutcome with
a reason, which the engine reports as MP001. The child's output goes through a pipe of which only the tail is kept
(a script printing gigabytes costs neither memory nor disk), and it writes no bytecode next to the user's files.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from mpdoctor.facts.codec import SchemaError
from mpdoctor.facts.schema import Facts

DEFAULT_TIMEOUT = 300.0
_OUTPUT_TAIL = 4000
_POLL = 0.05  # seconds between checks of the child's exit and memory


@dataclass
class TraceOutcome:
    facts: Facts | None  # None when the child produced nothing readable
    failure: str | None  # why there are no (complete) facts: timeout, killed, exit code...
    output_tail: str = ""  # the end of the child's stdout+stderr, for the MP001 message


def tensorflow_available() -> bool:
    return importlib.util.find_spec("tensorflow") is not None


def run_trace(
    path: str,
    *,
    entry: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    env: dict | None = None,
    checkpoints: tuple[str, ...] = (),
    source: str | None = None,
    run_from: str | None = None,
    numerics: dict | None = None,
    memory_limit_mb: float | None = None,
    policy: str | None = None,
    search_path: tuple[str, ...] = (),
    plan: dict | None = None,
) -> TraceOutcome:
    """`run_from`: a file whose text is run as if it were `path` (same `__file__`, code filename and sys.path), so a
    fix is verified without writing it into the user's tree. `source`: generated code to run that way (a
    notebook's cells), written to the temporary directory; the child then also runs in the file's directory (as
    Jupyter does). `policy`: the global dtype policy set before the file is imported (a library module that an
    entry point of its project runs under that policy); `search_path`: directories the module's imports are found
    from besides its own (the entry point's, as `python train.py` has it)."""
    with tempfile.TemporaryDirectory(prefix="mpdoctor-trace-") as workdir:
        request_path = os.path.join(workdir, "request.json")
        result_path = os.path.join(workdir, "facts.json")
        cwd = None
        if source is not None:
            run_from = os.path.join(workdir, "generated_source.py")
            with open(run_from, "w", encoding="utf-8") as handle:
                handle.write(source)
            cwd = os.path.dirname(os.path.abspath(path))
        with open(request_path, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "file": os.path.abspath(path),
                    "entry": entry,
                    "notebook": source is not None,
                    "numerics": numerics,
                    "scratch": os.path.join(workdir, "scratch"),
                    "source_file": run_from and os.path.abspath(run_from),
                    "checkpoints": [os.path.abspath(c) for c in checkpoints],
                    "policy": policy,
                    "plan": plan,  # `mpdoctor plan` (mpdoctor/plan.py): None for `check`
                },
                handle,
            )
        child_env = dict(os.environ if env is None else env)
        child_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        child_env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ in the user's tree
        child_env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [_package_root(), *search_path, child_env.get("PYTHONPATH")])
        )
        process = subprocess.Popen(
            [sys.executable, "-m", "mpdoctor.trace.child", request_path, result_path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=child_env,
            cwd=cwd,
            start_new_session=True,
        )  # its own process group: a timeout kills everything it started
        output = _TailReader(process.stdout)
        failure = _supervise(process, timeout, memory_limit_mb)
        tail = output.finish()
        facts = None
        if os.path.exists(result_path):
            try:
                with open(result_path, encoding="utf-8") as handle:
                    facts = Facts.from_json(json.load(handle))
            except SchemaError as exc:
                failure = failure or f"the trace produced unreadable facts ({exc})"
            except (OSError, ValueError, RecursionError) as exc:
                failure = failure or f"the trace child wrote unreadable facts ({exc})"
        elif failure is None:
            failure = "the trace child exited without reporting (the model code may have called os._exit)"
        return TraceOutcome(facts, failure, tail)


def _supervise(process: subprocess.Popen, timeout: float, memory_limit_mb: float | None) -> str | None:
    """Wait for the child; kill its process group on timeout or when its resident memory exceeds the limit.
    Returns why the run failed, or None."""
    deadline = time.monotonic() + timeout
    limit = int(memory_limit_mb * 2**20) if memory_limit_mb else None
    while True:
        try:
            returncode = process.wait(timeout=_POLL)
        except subprocess.TimeoutExpired:
            pass
        else:
            _kill_group(process)  # whatever the model code started and left behind
            return _exit_reason(returncode) if returncode != 0 else None
        if limit is not None and (_resident_bytes(process.pid) or 0) > limit:
            _kill_group(process)
            return f"the model code exceeded the memory limit of {memory_limit_mb:g} MiB (--trace-memory)"
        if time.monotonic() >= deadline:
            _kill_group(process)
            return f"the model code did not finish within {timeout:g} s (--trace-timeout)"


def _resident_bytes(pid: int) -> int | None:
    """The process's resident set size (Linux /proc; None elsewhere, where the limit is not enforced)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


class _TailReader:
    """Drains the child's output in a thread and keeps only its last bytes."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self._tail = b""
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while chunk := self._stream.read1(1 << 16):
            self._tail = (self._tail + chunk)[-_OUTPUT_TAIL:]

    def finish(self) -> str:
        """The tail, once the child's process group is gone and the pipe is at its end."""
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._stream.close()
        return self._tail.decode("utf-8", errors="replace")


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _exit_reason(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = " (out of memory?)" if name == "SIGKILL" else ""
        return f"the trace child was killed by {name}{hint}"
    return f"the trace child exited with code {returncode}"


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        if process.returncode is None:
            process.kill()
    process.wait()
