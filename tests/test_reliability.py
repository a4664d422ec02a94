"""Hostile input and interrupted runs (issue 15): each reproduction of ../shared/repros/reliability/F01..F15 as a
test. Every case ends as a finding, a clear one-line error (exit 2) or a skip with a note: never an internal error,
a hang, a lost report, an orphan process or a changed user file.

Tests that could hang or abort (FIFOs, signals, crafted checkpoints) run mpdoctor in a child process with a
timeout; the others call the command line's `main` in this process. The trace tests (TensorFlow) are at the end.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mpdoctor.cli import main

ROOT = Path(__file__).resolve().parent.parent
# A float16 softmax output: MP401 on line 3 (statically; confirmed when the trace runs it).
MODEL = (
    "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\n"
    "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation='softmax')])\n"
)
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
# Root without CAP_DAC_OVERRIDE: permissions apply as they do for a normal user.
NO_CAPS = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"] if IS_ROOT else []


def run_cli(*args, cwd: Path, timeout: float = 120, prefix: list[str] | None = None, env: dict | None = None):
    """mpdoctor in a child process (this worktree's package), bounded in time."""
    environment = dict(os.environ if env is None else env, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [*(prefix or []), sys.executable, "-m", "mpdoctor", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout,
        check=False,
    )


def run_main(*args, cwd: Path) -> tuple[int, str, str]:
    """`main` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    previous = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:
                code = exc.code
    finally:
        os.chdir(previous)
    return code, out.getvalue(), err.getvalue()


def one_line_errors(stderr: str) -> list[str]:
    """The stderr lines; none is a traceback or an internal error."""
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    return stderr.splitlines()


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def kill_quietly(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.waitpid(pid, os.WNOHANG)


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def snapshot(root: Path) -> dict[str, tuple[int, bytes | None]]:
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        data = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
        found[str(path.relative_to(root))] = (stat.S_IFMT(info.st_mode), data)
    return found


# --------------------------------------------------------------------------------------------- F01 file names


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "gitlab", "github", "junit", "html"])
def test_F01_non_utf8_file_names_work_in_every_format(tmp_path, fmt):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / os.fsdecode(b"bad\xff.py")).write_text(MODEL)
    result = run_cli("check", "--no-trace", "--format", fmt, "-o", "out", "d", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    one_line_errors(result.stderr)
    text = (tmp_path / "out").read_bytes().decode("utf-8")  # valid UTF-8, with a readable replacement
    if fmt in ("json", "sarif", "gitlab"):
        json.loads(text)
    if fmt == "sarif":
        assert '"uri": "d/bad%FF.py"' in text  # a URI carries the real byte
    else:
        assert "bad\\xff.py" in text.replace("\\\\", "\\")
    stdout = run_cli("check", "--no-trace", "--format", fmt, "d", cwd=tmp_path)
    assert stdout.returncode == 1 and "MP401" in stdout.stdout, stdout.stderr


# --------------------------------------------------------------------------------------------- F02 symlink loops


def test_F02_symlink_loops_are_reported_per_path_and_the_other_files_still_checked(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "m.py").write_text(MODEL)
    (folder / "a.py").symlink_to("b.py")
    (folder / "b.py").symlink_to("a.py")
    code, out, err = run_main("check", "--no-trace", "d", cwd=tmp_path)
    assert code == 2
    assert one_line_errors(err) == ["d/a.py: symlink loop", "d/b.py: symlink loop"]
    assert "d/m.py:3:" in out and "MP401" in out
    assert "2 files could not be checked" in out
    code, out, err = run_main("check", "--no-trace", "d/a.py", cwd=tmp_path)  # named directly
    assert code == 2 and one_line_errors(err) == ["d/a.py: symlink loop"]


# --------------------------------------------------------------------------------------------- F03 special files


@pytest.fixture
def specials(tmp_path):
    """A folder with a model, a FIFO, a socket and a link to /dev/zero beside it."""
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "m.py").write_text(MODEL)
    os.mkfifo(folder / "fifo.py")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "sock.py"))
    (folder / "zero.py").symlink_to("/dev/zero")
    yield folder
    server.close()


def test_F03_special_files_named_directly_are_refused(specials, tmp_path):
    for path, kind in (("d/fifo.py", "a FIFO"), ("/dev/null", "a character device"), ("d/sock.py", "a socket")):
        result = run_cli("check", "--no-trace", path, cwd=tmp_path, timeout=60)
        assert result.returncode == 2, (path, result.stderr)
        assert one_line_errors(result.stderr) == [f"{path}: not a regular file ({kind})"]
        assert "All checks passed" not in result.stdout and "1 file could not be checked" in result.stdout


def test_F03_special_files_in_a_walk_are_skipped_with_a_note(specials, tmp_path):
    result = run_cli("check", "--no-trace", "d", cwd=tmp_path, timeout=60)  # no hang on the FIFO, no /dev/zero read
    assert result.returncode == 1, result.stderr
    assert sorted(one_line_errors(result.stderr)) == [
        "mpdoctor: note: d/fifo.py: skipped: not a regular file (a FIFO)",
        "mpdoctor: note: d/sock.py: skipped: not a regular file (a socket)",
        "mpdoctor: note: d/zero.py: skipped: not a regular file (a character device)",
    ]
    assert "d/m.py:3:" in result.stdout and "in 1 file; 3 skipped." in result.stdout


@pytest.mark.parametrize("option", ["--config", "--baseline", "--sample"])
def test_F03_special_files_as_config_baseline_or_sample_are_refused(specials, tmp_path, option):
    for special, kind in (("d/fifo.py", "a FIFO"), ("/dev/zero", "a character device")):
        result = run_cli("check", "--no-trace", option, special, "d/m.py", cwd=tmp_path, timeout=60)
        assert result.returncode == 2, result.stderr
        [line] = one_line_errors(result.stderr)
        assert line.startswith(f"mpdoctor: error: {special}: ") and f"not a regular file ({kind})" in line


def test_F03_config_and_baseline_reads_are_size_capped(tmp_path, monkeypatch):
    from mpdoctor import reads

    monkeypatch.setattr(reads, "CONFIG_LIMIT", 1000)
    monkeypatch.setattr(reads, "BASELINE_LIMIT", 1000)
    (tmp_path / "m.py").write_text(MODEL)
    big = tmp_path / "big.toml"
    big.write_text("# padding\n" * 200)
    code, _, err = run_main("check", "--no-trace", "--config", big, "m.py", cwd=tmp_path)
    assert code == 2 and "too large for a pyproject.toml" in err
    code, _, err = run_main("check", "--no-trace", "--baseline", big, "m.py", cwd=tmp_path)
    assert code == 2 and "too large for a baseline" in err
    small = tmp_path / "small.toml"
    small.write_text("[tool.mpdoctor]\nfail-on = 'error'\n")
    code, _, err = run_main("check", "--no-trace", "--config", small, "m.py", cwd=tmp_path)
    assert code == 1, err  # below the cap: read as usual


# --------------------------------------------------------------------------------------------- F04 permissions


@pytest.mark.skipif(IS_ROOT and not shutil.which("setpriv"), reason="root without setpriv ignores permissions")
def test_F04_unreadable_folders_and_files_are_errors_naming_the_path(tmp_path):
    locked = tmp_path / "top" / "locked"
    locked.mkdir(parents=True)
    (locked / "m.py").write_text(MODEL)
    (tmp_path / "top" / "secret.py").write_text(MODEL)
    (tmp_path / "top" / "secret.py").chmod(0)
    locked.chmod(0)
    try:
        walk = run_cli("check", "--no-trace", "top", cwd=tmp_path, prefix=NO_CAPS)
        direct = run_cli("check", "--no-trace", "top/locked", cwd=tmp_path, prefix=NO_CAPS)
    finally:
        locked.chmod(0o755)
    assert walk.returncode == 2 and "All checks passed" not in walk.stdout
    assert sorted(one_line_errors(walk.stderr)) == [
        "top/locked: cannot read directory: Permission denied",
        "top/secret.py: cannot read file: Permission denied",
    ]
    assert "2 files could not be checked" in walk.stdout
    assert direct.returncode == 2  # was an internal error (PermissionError on top/locked/pyproject.toml)
    assert one_line_errors(direct.stderr) == ["top/locked: cannot read directory: Permission denied"]


# --------------------------------------------------------------------------------------------- F05 notebooks

NOTEBOOK_HEAD = '{"nbformat": 4, "nbformat_minor": 5, '


@pytest.mark.parametrize(
    "content,reason",
    [
        ("[" * 100_000 + "]" * 100_000, "not a valid notebook: JSON nested too deeply"),
        (NOTEBOOK_HEAD + '"metadata": {"kernelspec": "python3"}, "cells": []}', "metadata.kernelspec is a string"),
        (NOTEBOOK_HEAD + '"metadata": {"language_info": [1]}, "cells": []}', "metadata.language_info is a list"),
        (NOTEBOOK_HEAD + '"metadata": [], "cells": []}', "metadata is a list, not an object"),
        (NOTEBOOK_HEAD + '"metadata": {}, "cells": ["import keras"]}', "cell 1 is a string, not an object"),
        (
            NOTEBOOK_HEAD + '"metadata": {}, "cells": [{"cell_type": "code", "source": 5}]}',
            "cell 1: source is a number",
        ),
        (
            NOTEBOOK_HEAD + '"metadata": {}, "cells": [{"cell_type": "code", "source": [1]}]}',
            "cell 1: source is a list",
        ),
        (NOTEBOOK_HEAD + '"metadata": {}, "cells": [{"source": "x = 1"}]}', "cell 1 has no cell_type"),
    ],
    ids=[
        "deep",
        "kernelspec-str",
        "language-info-list",
        "metadata-list",
        "str-cells",
        "source-int",
        "source-ints",
        "no-cell-type",
    ],
)
def test_F05_malformed_notebooks_are_one_line_errors_and_others_still_checked(tmp_path, content, reason):
    (tmp_path / "bad.ipynb").write_text(content)
    (tmp_path / "m.py").write_text(MODEL)
    code, out, err = run_main("check", "--no-trace", "bad.ipynb", "m.py", cwd=tmp_path)
    assert code == 2
    [line] = one_line_errors(err)
    assert line.startswith("bad.ipynb: not a valid notebook: ") and reason in line, line
    assert "m.py:3:" in out and "1 file could not be checked" in out


def test_F05_a_well_formed_notebook_is_still_checked(tmp_path):
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "source": MODEL.splitlines(keepends=True)}
    notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"language": "python"}}, "cells": [cell]}
    (tmp_path / "good.ipynb").write_text(json.dumps(notebook))
    code, out, err = run_main("check", "--no-trace", "good.ipynb", cwd=tmp_path)
    assert code == 1 and one_line_errors(err) == [] and "good.ipynb:cell 1:line 3" in out


# --------------------------------------------------------------------------------------------- F06 numbers


@pytest.mark.parametrize("option", ["--trace-timeout", "--trace-memory"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "abc", "1e999"])
def test_F06_trace_limits_on_the_command_line_must_be_finite_positive_numbers(tmp_path, option, value):
    (tmp_path / "m.py").write_text(MODEL)
    code, out, err = run_main("check", "--no-trace", f"{option}={value}", "m.py", cwd=tmp_path)
    assert code == 2 and out == ""
    [line] = one_line_errors(err)
    assert line.startswith(f"mpdoctor: error: argument {option}: expected a positive number"), line


def test_F06_valid_trace_limits_are_accepted(tmp_path):
    (tmp_path / "m.py").write_text(MODEL)
    code, _, err = run_main(
        "check", "--no-trace", "--trace-timeout", "2.5", "--trace-memory", "512", "m.py", cwd=tmp_path
    )
    assert code == 1, err


@pytest.mark.parametrize(
    "toml,message",
    [
        ("tool = 5\n", "`tool` must be a table, got an integer"),
        ("[tool]\nmpdoctor = 5\n", "[tool.mpdoctor] must be a table, got an integer"),
        ("[tool]\nmpdoctor = [1]\n", "[tool.mpdoctor] must be a table, got an array"),
        ("[tool.mpdoctor]\ntrace-timeout = nan\n", "trace-timeout: expected a positive number of seconds, got nan"),
        ("[tool.mpdoctor]\ntrace-timeout = inf\n", "trace-timeout: expected a positive number of seconds, got inf"),
        ("[tool.mpdoctor]\ntrace-timeout = -3\n", "trace-timeout: expected a positive number of seconds, got -3"),
        ("[tool.mpdoctor]\ntrace-timeout = '5'\n", "trace-timeout: expected a positive number of seconds, got '5'"),
        ("[tool.mpdoctor]\ntrace-memory = nan\n", "trace-memory: expected a positive number of MiB, got nan"),
        ("[tool.mpdoctor]\ntrace-memory = true\n", "trace-memory: expected a positive number of MiB, got True"),
        ("[tool.mpdoctor]\nnumerics-threshold = inf\n", "numerics-threshold: expected a positive number"),
        ("[tool.mpdoctor]\nsample-range = [0, inf]\n", "sample-range: expected [low, high] with low < high"),
        ("[tool.mpdoctor]\nsample-range = [nan, 1]\n", "sample-range: expected [low, high] with low < high"),
        ("[tool.mpdoctor]\nassume-policy = ['x']\n", "assume-policy: expected one of"),
        ("[tool.mpdoctor]\nx = 1\n[tool.mpdoctor]\n", "invalid TOML"),
        ("a = " + "[" * 5000 + "]" * 5000 + "\n", "invalid TOML"),
    ],
)
def test_F06_config_numbers_and_shapes_are_config_errors(tmp_path, toml, message):
    (tmp_path / "pyproject.toml").write_text(toml)
    (tmp_path / "m.py").write_text(MODEL)
    code, out, err = run_main("check", "--no-trace", "m.py", cwd=tmp_path)
    assert code == 2 and out == ""
    [line] = one_line_errors(err)
    assert line.startswith("mpdoctor: error: ") and "pyproject.toml" in line and message in line, line


def test_F06_a_valid_config_still_applies(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool]\n[tool.mpdoctor]\ntrace-timeout = 30\nignore = ['MP401']\n")
    (tmp_path / "m.py").write_text(MODEL)
    code, out, err = run_main("check", "--no-trace", "m.py", cwd=tmp_path)
    assert code == 0 and "All checks passed" in out, err


# --------------------------------------------------------------------------------------------- F07 terminal injection

HOSTILE = "o\x1b]0;PWNED\x07\x1b[2J\r\nm.py:9:9: MP999 forged\x00\x9b\u202e"


def test_F07_text_output_escapes_control_characters_in_every_field():
    from mpdoctor.diagnostics import Diagnostic, FileError, Location, Report, Severity
    from mpdoctor.fix.results import FileFix
    from mpdoctor.report.text import render

    finding = Diagnostic(
        "MP401", f"layer `{HOSTILE}` computes softmax", Location(f"{HOSTILE}.py", 3, 1), Severity.ERROR
    )
    report = Report(diagnostics=[finding], files_checked=1, errors=[FileError(f"{HOSTILE}.py", HOSTILE)])
    report.fixes = [FileFix(f"{HOSTILE}.py", "a", "b", not_applied=[(finding, HOSTILE)], written=False)]
    out = io.StringIO()
    render(report, out)
    text = out.getvalue()
    assert not any(c in text for c in "\x1b\x07\x00\x9b\r\u202e")
    assert "o\\x1b]0;PWNED\\x07\\x1b[2J\\r\\nm.py:9:9: MP999 forged\\x00\\x9b\\u202e" in text
    assert all(not line.startswith("m.py:9:9") for line in text.splitlines())  # no forged finding line
    assert len(text.splitlines()) == 4  # the finding, its fix not applied, the fix summary, the summary


def test_F07_escaping_keeps_ordinary_text_and_drops_colour_codes():
    from mpdoctor.printable import escape_controls, readable_name

    assert escape_controls("tab\tand ünïcode ✓") == "tab\tand ünïcode ✓"
    assert escape_controls("\x1b[1mCould not infer\x1b[0m\x1b[8m hidden") == "Could not infer hidden"
    assert readable_name(os.fsdecode(b"bad\xff.py")) == "bad\\xff.py"


def test_F07_suppression_comments_and_file_names_are_escaped_in_static_output(tmp_path):
    (tmp_path / "sup.py").write_text(MODEL.rstrip("\n") + "  # mpdoctor: ignore[MP4\x1b[2J01]\n")
    (tmp_path / "esc\x1b[2J.py").write_text("def f(:\n")
    result = run_cli("check", "--no-trace", ".", cwd=tmp_path)
    assert result.returncode == 2
    assert "\x1b" not in result.stdout + result.stderr
    assert "unused suppression (MP4\\x1b[2J01)" in result.stdout
    assert one_line_errors(result.stderr) == ["esc\\x1b[2J.py:1:7: syntax error: invalid syntax"]


def test_F07_github_annotations_escape_control_characters_too():
    from mpdoctor.report.github import escape_data

    assert escape_data("a\x1b[2Jb\nc%") == "a\\x1b[2Jb%0Ac%25"


# --------------------------------------------------------------------------------------------- F08 processes

SETSID_SLEEPER = (
    "import subprocess, sys\n"
    "child = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
    "open(sys.argv[1], 'w').write(str(child.pid))\n"
)
# A double fork whose grandchild starts a new session and clears its environment: no process group, session or
# token leads back to the trace; only the subreaper (it is re-parented to this process) does.
DOUBLE_FORK_NO_ENV = (
    "import os, sys\n"
    "first = os.fork()\n"
    "if first == 0:\n"
    "    os.setsid()\n"
    "    second = os.fork()\n"
    "    if second == 0:\n"
    "        os.execve('/bin/sleep', ['sleep', '600'], {})\n"
    "    open(sys.argv[1], 'w').write(str(second))\n"
    "    os._exit(0)\n"
    "os.waitpid(first, 0)\n"
)


def _tree(code: str, *args):
    """A ProcessTree running `python -c code args...`."""
    from mpdoctor.trace.processes import ProcessTree

    return ProcessTree([sys.executable, "-c", code, *map(str, args)], env=dict(os.environ))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process discovery through /proc is Linux-only")
@pytest.mark.parametrize("code", [SETSID_SLEEPER, DOUBLE_FORK_NO_ENV], ids=["setsid", "double-fork-no-env"])
def test_F08_processes_that_leave_the_group_are_ended_with_the_trace(tmp_path, code):
    pid_file = tmp_path / "pid"
    with _tree(code, pid_file) as tree:
        ending = tree.supervise(timeout=60)
        grandchild = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), 30, "the grandchild's pid"))
        assert ending.failure is None and alive(grandchild)  # the child is done, what it started still runs
    try:
        assert not alive(grandchild)
    finally:
        kill_quietly(grandchild)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process discovery through /proc is Linux-only")
def test_F08_processes_of_another_live_trace_are_left_alone(tmp_path):
    """Parallel workers: ending one tree must not end what another tree (still running) started."""
    with _tree(SETSID_SLEEPER, tmp_path / "other"):
        other_sleeper = int(
            wait_for(lambda: (tmp_path / "other").exists() and (tmp_path / "other").read_text(), 30, "pid")
        )
        with _tree(SETSID_SLEEPER, tmp_path / "mine") as mine:
            mine.supervise(timeout=60)
            my_sleeper = int(
                wait_for(lambda: (tmp_path / "mine").exists() and (tmp_path / "mine").read_text(), 30, "pid")
            )
        assert not alive(my_sleeper) and alive(other_sleeper)
    try:
        assert not alive(other_sleeper)
    finally:
        kill_quietly(other_sleeper)
        kill_quietly(my_sleeper)


def test_F08_a_child_kept_alive_after_its_result_gets_a_grace_period_not_the_timeout(tmp_path):
    result = tmp_path / "facts.json"
    code = "import sys, threading\nopen(sys.argv[1], 'w').write('{}')\nthreading.Event().wait()\n"  # never exits
    with _tree(code, result) as tree:
        ending = tree.supervise(timeout=120, result_written=result.exists, grace=0.5)
    assert ending.after_result and ending.failure is None


def test_F08_the_timeout_ends_the_child(tmp_path):
    with _tree("import time\ntime.sleep(600)\n") as tree:
        ending = tree.supervise(timeout=0.5)
    assert "did not finish within 0.5 s (--trace-timeout)" in ending.failure
    assert tree.process.returncode is not None


def test_F08_signals_raise_exceptions_only_inside_the_block():
    from mpdoctor.signals import Terminated, signals_raise

    before = signal.getsignal(signal.SIGTERM)
    for number in (signal.SIGTERM, signal.SIGHUP):
        with pytest.raises(Terminated) as caught, signals_raise():
            os.kill(os.getpid(), number)
            time.sleep(5)  # interrupted by the handler
        assert caught.value.exit_code == 128 + number
    assert signal.getsignal(signal.SIGTERM) is before


# The trace child replaced by one that records where it runs, then spins: what a signal must clean up.
SPINNING_CHILD = (
    "import os, sys, time\n"
    "open(os.environ['SPIN_RECORD'], 'w').write(f'{os.getpid()} {os.path.dirname(sys.argv[1])}')\n"
    "while True:\n    time.sleep(0.01)\n"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals as on POSIX")
@pytest.mark.parametrize("number,exit_code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_F08_signals_end_the_trace_child_and_remove_its_folder(tmp_path, monkeypatch, number, exit_code):
    """In this process with a stand-in child (no TensorFlow): main() returns 128 + the signal number, the child
    is gone and the trace's temporary folder is removed. test_F08_signals_in_a_real_run does it for real."""
    from mpdoctor.trace import runner

    record = tmp_path / "record"
    monkeypatch.setenv("SPIN_RECORD", str(record))
    monkeypatch.setattr(
        runner, "child_command", lambda request, result: [sys.executable, "-c", SPINNING_CHILD, request]
    )
    monkeypatch.setattr(runner, "tensorflow_available", lambda: True)
    (tmp_path / "m.py").write_text(MODEL)

    def send_signal_once_running():
        wait_for(record.exists, 60, "the stand-in child")
        time.sleep(0.2)
        os.kill(os.getpid(), number)

    # As in a terminal: Ctrl-C raises KeyboardInterrupt (a pytest-xdist worker runs with SIGINT ignored).
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    before = signal.getsignal(signal.SIGTERM)
    sender = threading.Thread(target=send_signal_once_running, daemon=True)
    sender.start()
    try:
        code, _, err = run_main("check", "--trace", "--no-numerics", "m.py", cwd=tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous_int)
    sender.join(5)
    pid, folder = record.read_text().split(" ", 1)
    assert code == exit_code, err
    assert not alive(int(pid)) and not os.path.exists(folder)
    assert signal.getsignal(signal.SIGTERM) is before  # main() put the handlers back


# --------------------------------------------------------------------------------------------- F09 forged facts


@pytest.mark.parametrize(
    "document",
    [
        '{"version": 1, "models": "x", "exception": "s", "environment": 5}',  # wrong types
        "[" * 100_000,  # JSON nested beyond the decoder
        '{"version": 1, "models": [], "environment": {"keras_major": 1' + "0" * 30 + "}}",  # beyond int64
        '{"version": 1, "models": [], "environment": {"keras_major": 1' + "0" * 5000 + "}}",  # beyond int()
        '{"version": 1, "savedmodel_loads": [{"savedmodel": {"signatures": [{"inputs": [{"value": '
        + "[" * 200
        + "]" * 200
        + "}]}]}}]}",  # recursion in a free-form value
        "not json",
        "",
        '{"version": 1, "models": {"m": 1}, "layers": {"x": 1}}',
    ],
    ids=["wrong-types", "deep", "huge-int", "huge-number", "deep-any", "text", "empty", "map-for-list"],
)
def test_F09_forged_facts_are_unreadable_facts_and_static_findings_are_kept(tmp_path, monkeypatch, document):
    from mpdoctor.config import Config
    from mpdoctor.engine import TraceOptions, check_paths
    from mpdoctor.trace import runner

    forger = "import sys\nopen(sys.argv[1], 'w').write(sys.argv[2])\n"
    monkeypatch.setattr(
        runner, "child_command", lambda request, result: [sys.executable, "-c", forger, result, document]
    )
    (tmp_path / "m.py").write_text(MODEL)
    report = check_paths([tmp_path / "m.py"], Config(), TraceOptions(enabled=True))
    assert not report.errors
    codes = {(d.code, d.location.line) for d in report.diagnostics}
    assert ("MP401", 3) in codes
    [mp001] = [d for d in report.diagnostics if d.code == "MP001"]
    assert "the trace produced unreadable facts (" in mp001.message, mp001.message


@pytest.mark.parametrize("kind", ["fifo", "device-link", "directory"])
def test_F09_a_facts_file_replaced_by_a_special_file_is_unreadable_not_a_hang(tmp_path, kind):
    from mpdoctor.facts.codec import SchemaError
    from mpdoctor.trace.runner import read_facts

    path = tmp_path / "facts.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device-link":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    with pytest.raises(SchemaError):
        read_facts(str(path))


def test_F09_an_oversized_facts_file_is_unreadable(tmp_path, monkeypatch):
    from mpdoctor.facts.codec import SchemaError
    from mpdoctor.trace import runner

    monkeypatch.setattr(runner, "FACTS_LIMIT", 100)
    path = tmp_path / "facts.json"
    path.write_text(json.dumps({"version": 1, "models": [], "padding": "x" * 200}))
    with pytest.raises(SchemaError, match="larger than"):
        runner.read_facts(str(path))


def test_F09_valid_facts_still_read(tmp_path):
    from mpdoctor.facts.schema import new_facts
    from mpdoctor.trace.runner import read_facts

    facts = new_facts()
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts.to_json()))
    assert read_facts(str(path)).to_json() == facts.to_json()


# --------------------------------------------------------------------------------------------- F10 --fix metadata

CRLF_MODEL = (
    "import tensorflow as tf\r\nfrom tensorflow import keras\r\n"
    'keras.mixed_precision.set_global_policy("mixed_float16")\r\n'
    "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])\r\n"
    "opt = keras.optimizers.Adam()\r\n"
    "def step(x, y):\r\n"
    "    with tf.GradientTape() as tape:\r\n"
    "        loss = tf.reduce_mean((model(x) - y) ** 2)\r\n"
    "    grads = tape.gradient(loss, model.trainable_variables)\r\n"
    "    opt.apply_gradients(zip(grads, model.trainable_variables))\r\n"
)


@pytest.mark.parametrize("newline", ["\r\n", "\n"], ids=["crlf", "lf"])
def test_F10_lines_a_fix_inserts_get_the_files_line_endings(tmp_path, newline, pinned_target):
    path = tmp_path / "crlf.py"
    path.write_bytes(CRLF_MODEL.replace("\r\n", newline).encode())
    _, out, err = run_main("check", "--no-trace", "--fix", "--unsafe-fixes", "crlf.py", cwd=tmp_path)
    data = path.read_bytes()
    assert data != CRLF_MODEL.replace("\r\n", newline).encode(), out + err  # the fixes were applied
    assert data.count(b"\n") > CRLF_MODEL.count("\n")  # a line was inserted
    if newline == "\r\n":
        assert data.count(b"\r\n") == data.count(b"\n")
    else:
        assert b"\r" not in data


@pytest.mark.parametrize("linked", [False, True], ids=["renamed", "hard-linked"])
def test_F10_fix_keeps_mode_hard_links_and_extended_attributes(tmp_path, linked):
    """A plain file is replaced by rename; a file with another hard link is rewritten in place through it."""
    path = tmp_path / "own.py"
    path.write_text(MODEL)
    path.chmod(0o640)
    if linked:
        os.link(path, tmp_path / "hard.py")
    inode = path.stat().st_ino
    try:
        os.setxattr(path, "user.mpdoctor-test", b"kept")
        xattrs = True
    except OSError:  # the file system has no user extended attributes
        xattrs = False
    code, out, err = run_main("check", "--no-trace", "--fix", "own.py", cwd=tmp_path)
    assert code == 0 and "Fixed 1 problem in own.py" in out, err
    assert 'dtype="float32"' in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    if linked:
        assert 'dtype="float32"' in (tmp_path / "hard.py").read_text()  # the other link sees the fix
        assert path.stat().st_nlink == 2 and path.stat().st_ino == inode
    if xattrs:
        assert os.getxattr(path, "user.mpdoctor-test") == b"kept"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


@pytest.mark.skipif(not IS_ROOT, reason="giving a file to another owner needs root")
def test_F10_fix_as_root_keeps_owner_and_group(tmp_path):
    path = tmp_path / "own.py"
    path.write_text(MODEL)
    os.chown(path, 65534, 65534)
    code, _, err = run_main("check", "--no-trace", "--fix", "own.py", cwd=tmp_path)
    assert code == 0, err
    info = os.stat(path)
    assert (info.st_uid, info.st_gid) == (65534, 65534) and 'dtype="float32"' in path.read_text()


@pytest.mark.skipif(IS_ROOT and not shutil.which("setpriv"), reason="root without setpriv may write anything")
def test_F10_read_only_files_are_not_fixed(tmp_path):
    path = tmp_path / "ro.py"
    path.write_text(MODEL)
    path.chmod(0o444)
    result = run_cli("check", "--no-trace", "--fix", "ro.py", cwd=tmp_path, prefix=NO_CAPS)
    assert result.returncode == 1, result.stderr
    assert "ro.py:3: MP401 fix not applied: read-only: not fixed" in result.stdout
    assert path.read_text() == MODEL and stat.S_IMODE(path.stat().st_mode) == 0o444
    writable = tmp_path / "rw.py"
    writable.write_text(MODEL)
    result = run_cli("check", "--no-trace", "--fix", "rw.py", cwd=tmp_path, prefix=NO_CAPS)
    assert result.returncode == 0 and 'dtype="float32"' in writable.read_text(), result.stdout


# --------------------------------------------------------------------------------------------- F11 deep code


@pytest.mark.parametrize(
    "tail", ["f = " + "lambda: " * 900 + "1\n", "x = " + " + ".join(["1"] * 2500) + "\n"], ids=["lambdas", "sum"]
)
@pytest.mark.parametrize("mode", ["--fix", "--diff"])
def test_F11_fixes_on_deeply_nested_code_are_refused_and_the_findings_kept(tmp_path, tail, mode):
    path = tmp_path / "deep.py"
    path.write_text(MODEL + tail)
    code, out, err = run_main("check", "--no-trace", mode, "deep.py", cwd=tmp_path)
    one_line_errors(err)
    assert "deep.py:3: MP401 fix not applied: too deeply nested" in out + err
    assert path.read_text() == MODEL + tail
    if mode == "--fix":
        assert code == 1 and "deep.py:3:" in out and "1 problem (1 error)" in out


def test_F11_moderately_nested_code_is_still_fixed(tmp_path):
    path = tmp_path / "nested.py"
    path.write_text(MODEL + "x = " + " + ".join(["1"] * 150) + "\n")
    code, out, err = run_main("check", "--no-trace", "--fix", "nested.py", cwd=tmp_path)
    assert code == 0 and 'dtype="float32"' in path.read_text(), out + err


# --------------------------------------------------------------------------------------------- F12 writes


@pytest.mark.parametrize("option", ["--write-baseline", "-o", "--html"])
def test_F12_a_report_never_replaces_a_file_being_checked(tmp_path, option):
    (tmp_path / "keep.py").write_text(MODEL)
    (tmp_path / "m.py").write_text(MODEL)
    code, out, err = run_main("check", "--no-trace", option, "keep.py", cwd=tmp_path)  # the path was forgotten
    assert code == 2 and out == ""
    assert one_line_errors(err) == [
        f"mpdoctor: error: keep.py: is one of the files being checked; not overwritten ({option})"
    ]
    assert (tmp_path / "keep.py").read_text() == MODEL


def test_F12_reports_get_the_mode_of_a_normal_file_and_keep_an_existing_ones(tmp_path):
    (tmp_path / "m.py").write_text(MODEL)
    previous = os.umask(0o027)
    try:
        code, _, err = run_main("check", "--no-trace", "-o", "r.txt", "--html", "r.html", "m.py", cwd=tmp_path)
    finally:
        os.umask(previous)
    assert code == 1, err
    assert stat.S_IMODE((tmp_path / "r.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "r.html").stat().st_mode) == 0o640
    (tmp_path / "r.txt").chmod(0o604)
    run_main("check", "--no-trace", "-o", "r.txt", "m.py", cwd=tmp_path)
    assert stat.S_IMODE((tmp_path / "r.txt").stat().st_mode) == 0o604


def test_F12_reports_to_special_files(tmp_path):
    (tmp_path / "m.py").write_text(MODEL)
    os.mkfifo(tmp_path / "pipe")
    result = run_cli("check", "--no-trace", "-o", "pipe", "m.py", cwd=tmp_path, timeout=60)  # nobody reads it
    assert result.returncode == 2 and one_line_errors(result.stderr) == [
        "mpdoctor: error: pipe: cannot write report: a FIFO that nothing reads"
    ]
    code, _, err = run_main("check", "--no-trace", "-o", "/dev/null", "m.py", cwd=tmp_path)
    assert code == 1 and err == "" and os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    piped = run_cli("check", "--no-trace", "-o", "/dev/stdout", "m.py", cwd=tmp_path, timeout=60)  # a pipe
    assert piped.returncode == 1 and "m.py:3:" in piped.stdout, piped.stderr
    (tmp_path / "folder").mkdir()
    code, _, err = run_main("check", "--no-trace", "-o", "folder", "m.py", cwd=tmp_path)
    assert code == 2 and one_line_errors(err) == ["mpdoctor: error: folder: cannot write report: is a directory"]


def test_F12_a_write_that_fails_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    """ENOSPC in the middle of the write (simulated): the old baseline is intact; see the tmpfs test below."""
    import errno

    from mpdoctor import writes

    (tmp_path / "m.py").write_text(MODEL)
    (tmp_path / "bl.json").write_text("old baseline")
    real_open = open

    def full_disk_open(file, mode="r", *args, **kwargs):
        if "w" in mode and str(file).endswith(".mpdoctor-tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(writes, "open", full_disk_open, raising=False)
    code, _, err = run_main("check", "--no-trace", "--write-baseline", "bl.json", "m.py", cwd=tmp_path)
    assert code == 2
    assert one_line_errors(err)[-1] == "mpdoctor: error: bl.json: cannot write baseline: No space left on device"
    assert (tmp_path / "bl.json").read_text() == "old baseline"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bl.json", "m.py"]


# --------------------------------------------------------------------------------------------- F15 summary, parser


def test_F15_the_summary_never_says_all_passed_when_a_file_could_not_be_checked(tmp_path):
    (tmp_path / "broken.py").write_text("def f(:\n")
    (tmp_path / "clean.py").write_text("import keras\n")
    code, out, err = run_main("check", "--no-trace", ".", cwd=tmp_path)
    assert code == 2 and "All checks passed" not in out
    assert out.strip().splitlines()[-1] == "No problems found (1 file checked); 1 file could not be checked."
    assert one_line_errors(err) == ["broken.py:1:7: syntax error: invalid syntax"]
    code, out, _ = run_main("check", "--no-trace", "clean.py", cwd=tmp_path)
    assert code == 0 and out.strip() == "All checks passed (1 file checked)."


def test_F15_parser_limits_have_a_reason_and_nul_bytes_a_line(tmp_path):
    (tmp_path / "deepnot.py").write_text("import keras\nx = " + "not " * 50_000 + "keras\n")
    (tmp_path / "nul.py").write_bytes(b"import keras\nx = 1\ny = '\x00'\n")
    code, out, err = run_main("check", "--no-trace", "deepnot.py", "nul.py", cwd=tmp_path)
    assert code == 2
    lines = one_line_errors(err)
    assert lines[0].startswith("deepnot.py: cannot parse: ") and lines[0] != "deepnot.py: cannot parse: "
    assert lines[0].endswith("(MemoryError)") or lines[0].endswith("(RecursionError)")
    assert lines[1].startswith("nul.py:3:6: ")
    assert "2 files could not be checked" in out
