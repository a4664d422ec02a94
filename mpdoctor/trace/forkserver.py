"""TensorFlow imported once: a server process imports TensorFlow and Keras, then forks one child per trace.

A trace child pays 3-20 s for `import tensorflow` before the user's code runs. The server (`python -m
mpdoctor.trace.forkserver`) pays it once per mpdoctor run and per environment, and forks a fresh child for each
file: the child starts from a process in which nothing but imports happened (no TensorFlow op has run, no eager
context or thread pool exists, no user code ran), so one file's global policy, registered objects or
`keras.config` changes cannot reach the next file, which starts from a new fork. The child then behaves as the
process-per-file child did: own session, its own working directory, environment, sys.argv and sys.path, stdout and
stderr to the parent's pipe (a FIFO), stdin from /dev/null.

`TF_USE_LEGACY_KERAS` is read when TensorFlow is imported, so a server serves one environment: the parent keeps one
server per environment (`server_for`), with the variable already set as the target and the file ask
(trace.checks.child_environment, runner._with_legacy_request).

Protocol (JSON lines): the parent writes {"id", "argv", "env", "cwd", "output"} to the server's stdin; the server
answers {"id", "pid"} (or {"id", "error"}), and {"exited": pid, "returncode": n} when a child ends (negative: killed
by that signal, as subprocess reports it). The server ends when its stdin closes, killing the children it still has.

POSIX with `os.fork` only; elsewhere, or when the server cannot start, the runner starts a process per file
(`available()`, and `--verbose` says which). `MPDOCTOR_FORK_SERVER=0` turns it off.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

from mpdoctor.trace.child import inputs
from mpdoctor.trace.processes import TOKEN_VARIABLE, become_subreaper, spare

READY = "ready"
_ENV_SWITCH = "MPDOCTOR_FORK_SERVER"
_MAX_SERVERS = 3  # environments kept warm at once (Keras 3 and tf_keras are two); the oldest idle one is closed beyond
_START_TIMEOUT = 600.0  # seconds to import TensorFlow on a loaded machine
_ORPHAN_POLL = 0.02  # seconds between checks of a child whose server died


def available() -> bool:
    return hasattr(os, "fork") and sys.platform != "darwin" and os.environ.get(_ENV_SWITCH, "1") != "0"


class ForkedChild:
    """A child forked by the server, with the part of `subprocess.Popen`'s interface that supervision uses.

    When the server dies while the child runs (killed by the child itself, a sibling, `kill` or the OOM killer), the
    child lives on: on Linux it is re-parented to mpdoctor (a child subreaper, mpdoctor.trace.processes), which then
    waits for it itself, so its timeout, memory limit and end still apply and its exit status is its own (a file
    traced beside it gets its real result, not a false "killed"). Where it cannot be adopted, its process group is
    killed: never left running."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self._server = server
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.returncode(self.pid)
            if self.returncode is None and self._server.dead:
                self.returncode = self._poll_orphan()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            deadline = None if timeout is None else time.monotonic() + timeout
            code = self._server.wait_exit(self.pid, timeout)
            while code is None:  # the server is gone: wait for the child as its parent now
                code = self._poll_orphan()
                if code is None:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise subprocess.TimeoutExpired("trace child", timeout or 0.0)
                    time.sleep(_ORPHAN_POLL)
            self.returncode = code
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)

    def _poll_orphan(self) -> int | None:
        """The exit status of the child whose server died, once it ended; None while it runs."""
        try:
            done, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # not (yet) re-parented to mpdoctor, reaped already, or no subreaper here
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return -signal.SIGKILL  # gone, its status lost with the server (it had ended or was ended)
            except OSError:
                pass
            if become_subreaper():
                return None  # re-parenting follows the server's exit: the next poll collects it
            with contextlib.suppress(OSError):  # cannot wait for it: end it rather than leave it running
                os.killpg(self.pid, signal.SIGKILL)
            return -signal.SIGKILL
        return os.waitstatus_to_exitcode(status) if done else None


class ForkServer:
    def __init__(self, env: dict) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "mpdoctor.trace.forkserver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # Ctrl-C reaches mpdoctor, which ends the children; the server follows
        )
        spare(self._process.pid)  # a trace ending meanwhile must not take it for an orphan of its model code
        self._lock = threading.Condition()
        self._ids = itertools.count()
        self._answers: dict[int, dict] = {}
        self._exits: dict[int, int] = {}
        self._ready = False
        self._dead = False
        self._reserved = 0  # handed out by server_for, not yet spawned from: guarded by _servers_lock
        self._running: set[int] = set()  # children not yet reported ended
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def wait_ready(self, timeout: float = _START_TIMEOUT) -> bool:
        with self._lock:
            self._lock.wait_for(lambda: self._ready or self._dead, timeout)
            return self._ready and not self._dead

    @property
    def alive(self) -> bool:
        return not self._dead and self._process.poll() is None

    @property
    def dead(self) -> bool:
        """The server has ended: the exits of the children it had are no longer reported by it."""
        with self._lock:
            return self._dead

    def spawn(self, argv: list[str], env: dict, cwd: str | None, output: str) -> ForkedChild:
        """Fork a child running `python -m mpdoctor.trace.child ARGS` as `argv` describes. Raises OSError when
        the server cannot (it is gone, or the fork failed)."""
        try:
            return self._spawn(argv, env, cwd, output)
        finally:
            self.release()

    def reserve(self) -> None:
        """Keep it from being closed to make room for another environment until this file's child is spawned.
        Under _servers_lock (server_for holds it: no other thread may close it in between)."""
        self._reserved += 1

    def release(self) -> None:
        """What `reserve` kept is spawned from, or will not be."""
        with _servers_lock:
            self._reserved = max(0, self._reserved - 1)

    def _spawn(self, argv: list[str], env: dict, cwd: str | None, output: str) -> ForkedChild:
        request_id = next(self._ids)
        line = json.dumps({"id": request_id, "argv": argv, "env": env, "cwd": cwd, "output": output}) + "\n"
        with self._lock:
            if self._dead:
                raise OSError("the fork server has ended")
            try:
                self._process.stdin.write(line.encode())
                self._process.stdin.flush()
            except (OSError, ValueError) as exc:
                raise OSError(f"the fork server has ended ({exc})") from exc
            self._lock.wait_for(lambda: request_id in self._answers or self._dead, 60)
            answer = self._answers.pop(request_id, None)
            if answer is not None and "pid" in answer and answer["pid"] not in self._exits:
                self._running.add(answer["pid"])
        if answer is None or "pid" not in answer:
            raise OSError((answer or {}).get("error") or "the fork server did not answer")
        return ForkedChild(self, answer["pid"])

    @property
    def idle(self) -> bool:
        """No child running and none about to be: closing it ends nobody's trace. Under _servers_lock."""
        with self._lock:
            return not self._running and not self._reserved

    def returncode(self, pid: int) -> int | None:
        """The child's exit status as the server reported it; None while it runs, or when the server ended first
        (then ForkedChild asks the kernel)."""
        with self._lock:
            return self._exits.get(pid)

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        """As `returncode`, waiting up to `timeout` seconds for the report or the server's end."""
        with self._lock:
            if not self._lock.wait_for(lambda: pid in self._exits or self._dead, timeout):
                raise subprocess.TimeoutExpired("trace child", timeout)
            return self._exits.get(pid)

    def close(self) -> None:
        self.ask_to_end()
        self.wait_ended()

    def ask_to_end(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._process.stdin.close()  # the server kills what it still runs and exits
        with self._lock:
            importing = not self._ready and not self._dead
        if importing:  # started ahead (`start`) and never used: no child of its own yet, nothing to wait for
            self._process.kill()

    def wait_ended(self) -> None:
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def _read(self) -> None:
        for raw in self._process.stdout:
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            with self._lock:
                if message == READY:
                    self._ready = True
                elif "exited" in message:
                    self._exits[message["exited"]] = message["returncode"]
                    self._running.discard(message["exited"])
                elif "id" in message:
                    self._answers[message["id"]] = message
                self._lock.notify_all()
        with self._lock:
            self._dead = True
            self._lock.notify_all()


_servers: dict[tuple, ForkServer] = {}
_servers_lock = threading.Lock()
_notes: list[str] = []


def note(text: str) -> None:
    if text not in _notes:
        _notes.append(text)


def notes() -> list[str]:
    """How the trace children were started in this run, for --verbose."""
    return list(_notes)


def _key(env: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k != TOKEN_VARIABLE))


def start(env: dict) -> None:
    """Start the server of `env` without waiting for it, so that servers of different environments import
    TensorFlow side by side; `server_for` then finds it. Never closes another server to make room."""
    key = _key(env)
    with _servers_lock:
        server = _servers.get(key)
        if (server is not None and server.alive) or len(_servers) >= _MAX_SERVERS:
            return
        with contextlib.suppress(OSError):  # server_for tries again, and says why it cannot
            _servers[key] = ForkServer(env)


def server_for(env: dict) -> ForkServer | None:
    """A ready server whose TensorFlow was imported under `env` (the trace token aside, which is each child's own;
    PYTHONPATH included, so no file's import path reaches another file's child), started on first use; None when
    none can run here."""
    if not available():
        note("trace: a process per file (the fork server is off: MPDOCTOR_FORK_SERVER=0, or no os.fork here)")
        return None
    key = _key(env)
    with _servers_lock:
        server = _servers.get(key)
        if server is not None and not server.alive:
            del _servers[key]
            server = None
        if server is None:
            if not _make_room():
                note("trace: a process per file where more environments than fork servers were busy at once")
                return None
            try:
                server = _servers[key] = ForkServer(env)
            except OSError as exc:
                note(f"trace: a process per file (the fork server did not start: {exc})")
                return None
        server.reserve()
    if not server.wait_ready():
        server.release()
        note("trace: a process per file (the fork server could not import TensorFlow or Keras)")
        return None
    backend = env.get("KERAS_BACKEND") or "tensorflow"  # named by the parent whenever it is not the default
    imported = "TensorFlow" if backend == "tensorflow" else f"Keras on {backend}"
    note(f"trace: {imported} imported once per environment; a fresh fork of it per file (fork server)")
    return server


def _make_room() -> bool:
    """Close the oldest idle servers until one more fits; False when every server has a trace running (closing one
    would kill that trace's child). Under _servers_lock."""
    for key in [key for key, server in _servers.items() if not server.alive]:
        del _servers[key]
    while len(_servers) >= _MAX_SERVERS:
        idle = next((key for key, server in _servers.items() if server.idle), None)
        if idle is None:
            return False
        _servers.pop(idle).close()
    return True


@atexit.register
def close_all() -> None:
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:  # all asked first: they end side by side
        server.ask_to_end()
    for server in servers:
        server.wait_ended()


# ---------------------------------------------------------------------------------------------------- server side


def serve() -> None:
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # whatever the imports print goes nowhere, never into the protocol
    os.close(null)
    inputs.start()  # what importing TensorFlow reads (keras.json, variables) is every child's input too
    _preload()
    answers.write(json.dumps(READY) + "\n")
    children: set[int] = set()
    pending = b""
    try:
        while True:
            readable, _, _ = select.select([requests], [], [], 0.02)
            if readable:
                chunk = requests.read(1 << 16)
                if not chunk:
                    return
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    _answer(json.loads(line), requests, answers, children)
            for pid in list(children):
                with contextlib.suppress(ChildProcessError):
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        children.discard(pid)
                        answers.write(json.dumps({"exited": pid, "returncode": os.waitstatus_to_exitcode(status)}))
                        answers.write("\n")
    finally:
        for pid in children:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)


def _preload() -> None:
    """What every trace child imports first: TensorFlow and its Keras, or Keras on its JAX or PyTorch backend (one
    server per backend: KERAS_BACKEND is in the environment a server is keyed on). Imports only: an op run here
    would create the runtime (thread pools) in the server, which a fork does not carry over safely."""
    from mpdoctor.trace.child import backends, main  # noqa: F401

    if not backends.tensorflow():  # JAX or PyTorch, imported by Keras itself; never TensorFlow
        import keras

        return
    import tensorflow  # noqa: F401

    from mpdoctor.facts.keras_semantics import legacy_keras_env

    if legacy_keras_env():
        with contextlib.suppress(ImportError):
            import tf_keras  # noqa: F401
    else:
        with contextlib.suppress(ImportError):
            import keras  # noqa: F401


def _answer(request: dict, requests, answers, children: set[int]) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError as exc:
        answers.write(json.dumps({"id": request["id"], "error": f"fork failed: {exc}"}) + "\n")
        return
    if pid == 0:
        requests.close()
        answers.close()
        _run_child(request)  # never returns
    children.add(pid)
    answers.write(json.dumps({"id": request["id"], "pid": pid}) + "\n")


def _run_child(request: dict) -> None:
    code = 1
    try:
        os.setsid()
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(signum, signal.SIG_DFL)
        output = os.open(request["output"], os.O_WRONLY)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        if request["cwd"]:
            os.chdir(request["cwd"])
        with inputs.unrecorded():
            os.environ.clear()
            os.environ.update(request["env"])
        sys.dont_write_bytecode = True
        sys.argv = [os.path.join(os.path.dirname(__file__), "child", "__main__.py"), *request["argv"]]
        # As `python -m` in that directory with that PYTHONPATH would have it.
        sys.path[0] = os.getcwd()
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        sys.path[1:1] = extra
        from mpdoctor.trace.child.main import main

        code = main(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()  # as the interpreter's exit would: the user's handlers run (and may misbehave)
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    serve()
    os._exit(0)  # its children are ended and its answers flushed: skip TensorFlow's slow interpreter teardown
