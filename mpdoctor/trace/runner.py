"""Parent side of the trace pass: run the child in its own process with a timeout and read its facts back.

A crash, hang or `os._exit` of the child never takes mpdoctor down: it becomes a TraceOutcome with a reason, which
the engine reports as MP001.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

DEFAULT_TIMEOUT = 300.0
_OUTPUT_TAIL = 4000


@dataclass
class TraceOutcome:
    facts: dict | None  # None when the child produced nothing readable
    failure: str | None  # why there are no (complete) facts: timeout, killed, exit code...
    output_tail: str = ""  # the end of the child's stdout+stderr, for the MP001 message


def tensorflow_available() -> bool:
    return importlib.util.find_spec("tensorflow") is not None


def run_trace(path: str, *, entry: str | None = None, timeout: float = DEFAULT_TIMEOUT,
              env: dict | None = None, checkpoints: tuple[str, ...] = (), source: str | None = None) -> TraceOutcome:
    """Trace `path`; with `source`, run that file's text instead, as if it were `path` (same `__file__`, code
    filename and sys.path), so a fix is verified without writing it into the user's tree."""
    with tempfile.TemporaryDirectory(prefix="mpdoctor-trace-") as workdir:
        request_path = os.path.join(workdir, "request.json")
        result_path = os.path.join(workdir, "facts.json")
        output_path = os.path.join(workdir, "output.txt")
        with open(request_path, "w", encoding="utf-8") as handle:
            json.dump({"file": os.path.abspath(path), "source": source and os.path.abspath(source), "entry": entry,
                       "checkpoints": [os.path.abspath(c) for c in checkpoints]}, handle)
        child_env = dict(os.environ if env is None else env)
        child_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [_package_root(), child_env.get("PYTHONPATH")]))
        with open(output_path, "wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "mpdoctor.trace.child", request_path, result_path],
                stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, env=child_env,
                start_new_session=True)  # its own process group: a timeout kills everything it started
            failure = None
            try:
                returncode = process.wait(timeout=timeout)
                if returncode != 0:
                    failure = _exit_reason(returncode)
            except subprocess.TimeoutExpired:
                _kill_group(process)
                failure = f"the model code did not finish within {timeout:g} s (--trace-timeout)"
        tail = _tail(output_path)
        facts = None
        if os.path.exists(result_path):
            try:
                with open(result_path, encoding="utf-8") as handle:
                    facts = json.load(handle)
            except (OSError, ValueError) as exc:
                failure = failure or f"the trace child wrote unreadable facts ({exc})"
        elif failure is None:
            failure = "the trace child exited without reporting (the model code may have called os._exit)"
        return TraceOutcome(facts, failure, tail)


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
        process.kill()
    process.wait()


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - _OUTPUT_TAIL))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
