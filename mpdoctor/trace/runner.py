"""Parent side of the trace pass: run the child in its own process with a timeout and read its facts back.

A crash, hang, memory blow-up or `os._exit` of the child never takes mpdoctor down: it becomes a TraceOutcome with
a reason, which the engine reports as MP001. The child's output goes through a pipe of which only the tail is kept
(a script printing gigabytes costs neither memory nor disk), and it writes no bytecode next to the user's files.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mpdoctor.facts.codec import SchemaError
from mpdoctor.facts.keras_semantics import LEGACY_KERAS_ENV, file_legacy_keras_setting, file_turns_on_legacy_keras
from mpdoctor.facts.schema import STOP_SIGNAL, Facts
from mpdoctor.facts.trace_request import NumericsRequest, PlanRequest, StepCheckRequest, TraceRequest
from mpdoctor.project.layout import ImportLayout, own_top_levels
from mpdoctor.reads import not_regular, read_bytes
from mpdoctor.trace import forkserver
from mpdoctor.trace.processes import ProcessTree

DEFAULT_TIMEOUT = 300.0
_CHILD_MODULE = "mpdoctor.trace.child"
FACTS_LIMIT = 512 * 2**20  # the facts of a huge model with numerics are tens of MiB
_OUTPUT_TAIL = 4000


@dataclass
class TraceOutcome:
    facts: Facts | None  # None when the child produced nothing readable
    failure: str | None  # why there are no (complete) facts: timeout, killed, exit code...
    output_tail: str = ""  # the end of the child's stdout+stderr, for the MP001 message
    crash_stack: str = ""  # the child killed by a fatal signal: faulthandler's dump of where it was


def tensorflow_available() -> bool:
    return importlib.util.find_spec("tensorflow") is not None


def backend_missing(keras_backend: str | None = None, needed_by: str = "--trace") -> str | None:
    """Why the trace cannot run here on the Keras backend chosen (mpdoctor.facts.keras_backends.chosen_backend, with
    `keras_backend` the configured one): what to install, or the backend it does not run on; None when it can.
    `needed_by`: what the message says needs it. Found, not imported: importing TensorFlow, JAX or PyTorch costs
    seconds."""
    from mpdoctor.facts.keras_backends import BACKEND_MODULES, TRACED_BACKENDS
    from mpdoctor.trace.backend_choice import chosen_backend

    choice = chosen_backend(keras_backend)
    where = f" ({choice.origin})" if choice.origin else ""
    if choice.name not in TRACED_BACKENDS:
        return f"the trace runs on the tensorflow, jax and torch backends of Keras, not on {choice.name!r}{where}"
    if choice.tensorflow:
        if tensorflow_available():
            return None
        return (
            f"{needed_by} needs TensorFlow in this environment "
            "(pip install tensorflow, or mpdoctor's [tf] extra: README, Install)"
        )
    missing = [name for name in ("keras", BACKEND_MODULES[choice.name]) if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return (
        f"{needed_by} on the {choice.name} backend{where} needs {' and '.join(missing)} in this environment "
        f"(pip install 'mpdoctor[{choice.name}]')"
    )


def run_trace(
    path: str,
    *,
    entry: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    env: dict | None = None,
    checkpoints: tuple[str, ...] = (),
    source: str | None = None,
    run_from: str | None = None,
    numerics: NumericsRequest | None = None,
    memory_limit_mb: float | None = None,
    policy: str | None = None,
    search_path: tuple[str, ...] = (),
    plan: PlanRequest | None = None,
    step_check: StepCheckRequest | None = None,
    layout: ImportLayout | None = None,
    stub_missing: bool = False,
    training_steps: tuple[str, ...] = (),
) -> TraceOutcome:
    """`run_from`: a file whose text is run as if it were `path` (same `__file__`, code filename and sys.path), so a
    fix is verified without writing it into the user's tree. `source`: generated code to run that way (a
    notebook's cells), written to the temporary directory; the child then also runs in the file's directory (as
    Jupyter does). `policy`: the global dtype policy set before the file is imported (a library module that an
    entry point of its project runs under that policy, or --assume-policy's); `search_path`: directories the
    module's imports are found from besides its own (the entry point's, as `python train.py` has it); `layout`:
    how the project's tooling imports the file (its roots on sys.path, its dotted name inside a package), passed in
    the request so that files of every project share one fork server; `stub_missing`: stand-ins for the missing
    non-ML modules the project's code imports (mpdoctor.trace.child.stand_ins)."""
    with tempfile.TemporaryDirectory(prefix="mpdoctor-trace-") as workdir:
        request_path = os.path.join(workdir, "request.json")
        result_path = os.path.join(workdir, "facts.json")
        crash_log = os.path.join(workdir, "crash.txt")
        cwd = None
        if source is not None:
            run_from = os.path.join(workdir, "generated_source.py")
            with open(run_from, "w", encoding="utf-8") as handle:
                handle.write(source)
            cwd = os.path.dirname(os.path.abspath(path))
        with open(request_path, "w", encoding="utf-8") as handle:
            request = TraceRequest(
                file=os.path.abspath(path),
                entry=entry,
                notebook=source is not None,
                numerics=numerics,
                scratch=os.path.join(workdir, "scratch"),
                source_file=run_from and os.path.abspath(run_from),
                checkpoints=[os.path.abspath(c) for c in checkpoints],
                policy=policy,
                module=layout.module if layout is not None else None,
                search_path=list(layout.search_path) if layout is not None else [],
                root=layout.root if layout is not None else None,
                stub_missing=stub_missing,
                own_modules=list(own_top_levels(layout or ImportLayout(None, (), None), path)) if stub_missing else [],
                plan=plan,
                step_check=step_check,
                crash_log=crash_log,
                training_steps=list(training_steps),
            )
            json.dump(request.to_json(), handle)
        child_env = _child_environment(env, search_path)
        # Its own session and process group; whatever it starts is ended with it (mpdoctor.trace.processes).
        child = _Child(child_command(request_path, result_path), child_env, cwd, workdir, run_from or path)
        with child.tree as tree:
            ending = tree.supervise(
                timeout,
                memory_limit_mb,
                result_written=lambda: os.path.exists(result_path),
                stop_signal=child.stop_signal,
            )
        tail = child.finish()
        failure = ending.failure
        if failure is None and ending.returncode and not ending.after_result:
            failure = _exit_reason(ending.returncode)
        facts = None
        if os.path.lexists(result_path):
            try:
                facts = read_facts(result_path)
                tail = _user_paths(facts.saved_paths)(tail)
            except SchemaError as exc:
                failure = failure or f"the trace produced unreadable facts ({exc})"
        elif failure is None:
            failure = "the trace child exited without reporting (the model code may have called os._exit)"
        crashed = ending.returncode is not None and ending.returncode < 0 and facts is None
        return TraceOutcome(facts, failure, tail, _crash_stack(crash_log) if crashed else "")


_CRASH_LIMIT = 256 * 1024


def _crash_stack(crash_log: str) -> str:
    """faulthandler's dump of a child a fatal signal killed (its stack when the signal came), "" when none."""
    try:
        return read_bytes(crash_log, _CRASH_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _child_environment(env: dict | None, search_path: tuple[str, ...]) -> dict:
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    child_env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ in the user's tree
    child_env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [_package_root(), *search_path, child_env.get("PYTHONPATH")])
    )
    return child_env


def start_server(path: str, *, env: dict | None = None, search_path: tuple[str, ...] = ()) -> None:
    """Start the fork server that `run_trace(path, env=env, search_path=search_path)` will fork its child from,
    without waiting for it to import TensorFlow."""
    if forkserver.available():
        forkserver.start(_with_legacy_request(_child_environment(env, search_path), path))


class _Child:
    """The trace child, forked by the fork server that imported TensorFlow once (mpdoctor.trace.forkserver) when it
    can run here, else a process of its own; its output (stdout and stderr) goes to a pipe of which the tail is
    kept either way."""

    def __init__(self, argv: list[str], env: dict, cwd: str | None, workdir: str, source_path: str) -> None:
        self._hold = None
        server = None
        self.stop_signal = None  # what asks the child to stop at the timeout (a stand-in child of the tests: none)
        if argv[1:3] == ["-m", _CHILD_MODULE]:  # not a stand-in child of the tests
            self.stop_signal = STOP_SIGNAL
            env = _with_legacy_request(env, source_path)
            server = forkserver.server_for(env)
        if server is not None:
            fifo = os.path.join(workdir, "output")
            os.mkfifo(fifo, 0o600)
            reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            self._hold = os.open(fifo, os.O_WRONLY)  # no end of file before the child has opened its end
            os.set_blocking(reader, True)
            stream = os.fdopen(reader, "rb")
            try:
                self.tree = ProcessTree(argv, env=env, cwd=cwd, spawn=lambda a, e, c: server.spawn(a[3:], e, c, fifo))
            except OSError as exc:
                forkserver.note(f"the fork server failed ({exc}); a process for this file")
                stream.close()
                self._release()
                server = None
        if server is None:
            self.tree = ProcessTree(
                argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            stream = self.tree.process.stdout
        self._output = _TailReader(stream)

    def finish(self) -> str:
        """The output's tail, once the tree has ended."""
        self._release()
        return self._output.finish()

    def _release(self) -> None:
        if self._hold is not None:
            os.close(self._hold)
            self._hold = None


def _with_legacy_request(env: dict, source_path: str) -> dict:
    """`env` with TF_USE_LEGACY_KERAS as the file sets it (keras_adapter.honour_legacy_request does the same in the
    child): TensorFlow reads it on import, which the fork server has done before the file runs."""
    try:
        with open(source_path, encoding="utf-8", errors="replace") as handle:
            setting = file_legacy_keras_setting(ast.parse(handle.read()))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return env
    return dict(env, **{LEGACY_KERAS_ENV: "1"}) if file_turns_on_legacy_keras(setting, env) else env


def child_command(request_path: str, result_path: str) -> list[str]:
    """The trace child's command line (tests replace it with a child that writes forged facts)."""
    return [sys.executable, "-m", _CHILD_MODULE, request_path, result_path]


def _user_paths(saved_paths) -> Callable[[Any], Any]:
    """A function mapping the paths in trace facts (any JSON value) back to what the user's code asked for: the
    child redirected saves into its scratch directory (`saved_paths`: where it wrote -> the path as given), and
    messages, restore paths and TensorFlow's errors must name the user's `pretrained`, not a temporary folder."""
    if not isinstance(saved_paths, dict) or not saved_paths:
        return lambda value: value
    pairs = [(str(written), str(asked)) for written, asked in saved_paths.items()]
    # A save's own directory in the scratch tree (`.../scratch/3`) stands for the directory the code named.
    folders = [(os.path.dirname(written), os.path.dirname(asked) or ".") for written, asked in pairs]
    patterns = [(re.compile(re.escape(w)), a) for w, a in sorted(pairs, key=lambda p: -len(p[0]))]
    patterns += [(re.compile(re.escape(w) + r"(?![\w-])"), a) for w, a in sorted(folders, key=lambda p: -len(p[0]))]

    def text(value: str) -> str:
        for pattern, asked in patterns:
            value = pattern.sub(lambda _match, asked=asked: asked, value)
        return value

    def back(value, key: str | None = None):
        if key in ("saved_paths", "written_to"):  # these name the scratch directory on purpose
            return value
        if isinstance(value, str):
            return text(value)
        if isinstance(value, list):
            return [back(v) for v in value]
        if isinstance(value, dict):
            return {k: back(v, k) for k, v in value.items()}
        return value

    return back


def read_facts(path: str) -> Facts:
    """The child's facts: untrusted (the child ran user code, which can overwrite or replace the file), so read
    like any hostile input: a regular file (never a FIFO or a link to a device), capped in size, JSON bounded in
    depth, then the schema. Anything else is a SchemaError."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise SchemaError(f"cannot open the facts file: {exc.strerror or exc}") from None
    try:
        problem = not_regular(os.fstat(fd).st_mode)
        if problem:
            raise SchemaError(f"the facts file is {problem}")
        chunks, size = [], 0
        while size <= FACTS_LIMIT and (chunk := os.read(fd, 1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise SchemaError(f"cannot read the facts file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > FACTS_LIMIT:
        raise SchemaError(f"the facts file is larger than {FACTS_LIMIT // 2**20} MiB")
    try:
        document = json.loads(b"".join(chunks))
    except RecursionError:
        raise SchemaError("JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:  # also integers of more digits than Python converts
        raise SchemaError(f"invalid JSON: {exc}") from None
    try:
        # Paths the child redirected into its scratch folder are shown as the user's code named them.
        return Facts.from_json(
            _user_paths(document.get("saved_paths") if isinstance(document, dict) else None)(document)
        )
    except SchemaError:
        raise
    except RecursionError:
        raise SchemaError("nested too deeply") from None
    except Exception as exc:  # the schema's own checks missed a shape: still unreadable facts, never a crash
        raise SchemaError(f"{type(exc).__name__}: {exc}") from None


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
