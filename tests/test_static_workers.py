"""`check --jobs N` without the trace (issue 17): the static pass in forked worker processes gives the report of one
process byte for byte, in the same order; Ctrl-C and SIGTERM end the workers (no orphans, the signal's exit code);
a worker that dies is one line and exit 2, never a hang."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from test_reliability import ROOT, alive, kill_quietly, wait_for

from mpdoctor import static_workers
from mpdoctor.static_workers import WorkerDied, chunks_of, plan_workers, results_in_order

POSIX_FORK = pytest.mark.skipif(static_workers.fork_problem() is not None, reason="no fork here")
# The repository's own inputs: every rule's fixtures (the projects with their policy contexts included), the
# examples and the golden inputs (a notebook among them).
INPUTS = ("tests/fixtures", "examples", "tests/golden/inputs")
WORKERS_NOTE = "mpdoctor: static pass in 2 worker processes"

# Runs mpdoctor's command line with engine.check_source wrapped by BEHAVIOUR (Python code defining
# `behaviour(shown)`, called in whichever process checks the file); workers inherit the wrapper through fork.
DRIVER = """
import os, signal, sys, time
from mpdoctor import engine
from mpdoctor.cli import main

{behaviour}

original = engine.check_source

def check_source(text, shown, *args, **kwargs):
    behaviour(shown)
    return original(text, shown, *args, **kwargs)

engine.check_source = check_source
sys.exit(main(sys.argv[1:]))
"""


def run(*args: str, cwd: Path = ROOT, behaviour: str | None = None, timeout: float = 300):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = ["-m", "mpdoctor"] if behaviour is None else ["-c", DRIVER.format(behaviour=behaviour)]
    return subprocess.run(
        [sys.executable, *command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def model_files(directory: Path, count: int, marker: str = "") -> Path:
    """`count` small Keras model files, together well above the size where workers pay off."""
    directory.mkdir(parents=True, exist_ok=True)
    body = textwrap.dedent("""
        import tensorflow as tf
        from tensorflow import keras

        keras.mixed_precision.set_global_policy("mixed_float16")


        def build_{n}():
            inputs = keras.Input((32,))
            x = keras.layers.Dense(64, activation="relu")(inputs)
            x = tf.cast(x, tf.float16)
            outputs = keras.layers.Dense(10, activation="softmax")(x)
            return keras.Model(inputs, outputs)
        """)
    for n in range(count):
        (directory / f"model_{n:03d}{marker}.py").write_text(body.format(n=n) * 8)
    return directory


# ------------------------------------------------------------------------------------- the same report, byte for byte


@POSIX_FORK
@pytest.mark.parametrize("fmt", ["json", "text"])
def test_workers_give_the_report_of_one_process_byte_for_byte(fmt, tmp_path):
    (tmp_path / "broken.py").write_text("import keras\ndef broken(:\n")
    inputs = (*INPUTS, str(tmp_path))
    one = run("check", "--no-trace", "--format", fmt, "--jobs", "1", "-v", *inputs)
    two = run("check", "--no-trace", "--format", fmt, "--jobs", "2", "-v", *inputs)
    assert WORKERS_NOTE in two.stderr.splitlines() and WORKERS_NOTE not in one.stderr  # the parallel path ran
    assert one.returncode == two.returncode == 2  # the file that does not parse
    assert two.stdout == one.stdout
    assert [line for line in two.stderr.splitlines() if line != WORKERS_NOTE] == one.stderr.splitlines()
    if fmt == "json":  # what each file's check leaves in the report came back from the workers
        # the findings' JSON was encoded in the workers; --html turns that off: the same text from the parent
        encoded_here = run("check", "--no-trace", "--format", fmt, "--html", str(tmp_path / "r.html"), *inputs)
        assert encoded_here.stdout == two.stdout
        report = json.loads(two.stdout)
        assert report["summary"]["files"] > 100 and len(report["files"]) == report["summary"]["files"]
        assert any("context" in d for d in report["diagnostics"])  # a project's policy context
        assert any(d["cell"] for d in report["diagnostics"])  # a notebook's cells
        assert any(e["kind"] == "syntax" for e in report["errors"])


@POSIX_FORK
def test_workers_count_what_one_process_counts_on_a_large_tree(tmp_path):
    model_files(tmp_path / "models", 60)
    one = run("check", "--no-trace", "--statistics", "--jobs", "1", "models", cwd=tmp_path)
    # -j is capped at the usable cores: three of them here, whatever the machine has.
    cores = "engine.usable_cores = lambda: 3\ndef behaviour(shown):\n    pass"
    three = run("check", "--no-trace", "--statistics", "--jobs", "3", "-v", "models", cwd=tmp_path, behaviour=cores)
    assert "mpdoctor: static pass in 3 worker processes" in three.stderr
    assert one.returncode == three.returncode == 1 and three.stdout == one.stdout
    assert "Found" in one.stdout and "60 files" in one.stdout


# --------------------------------------------------------------------------------- when a worker fails or dies


@POSIX_FORK
def test_an_exception_in_a_worker_is_the_internal_error_of_one_process(tmp_path):
    model_files(tmp_path / "models", 60)
    behaviour = "def behaviour(shown):\n    if shown.endswith('model_042.py'):\n        raise ValueError('boom')"
    results = [run("check", "--no-trace", "--jobs", jobs, "models", cwd=tmp_path, behaviour=behaviour) for jobs in "12"]
    for result in results:
        assert result.returncode == 2
        assert result.stderr == "mpdoctor: internal error: ValueError: boom (please report this)\n"


@POSIX_FORK
def test_a_worker_that_dies_is_one_line_and_exit_2_never_a_hang(tmp_path):
    model_files(tmp_path / "models", 60)
    pids = tmp_path / "pids"
    behaviour = (
        "def behaviour(shown):\n"
        f"    open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        "    if shown.endswith('model_042.py'):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)"
    )
    result = run("check", "--no-trace", "--jobs", "2", "models", cwd=tmp_path, behaviour=behaviour, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    died = re.fullmatch(
        r"mpdoctor: internal error: WorkerDied: a static worker process \(pid \d+, killed by SIGKILL\) died while "
        r"checking one of files \d+-\d+ \(models/model_(\d+)\.py to models/model_(\d+)\.py\) \(please report this\)\n",
        result.stderr,
    )
    assert died and int(died[1]) <= 42 <= int(died[2]), result.stderr  # the files it was given
    workers = {int(pid) for pid in pids.read_text().split()}
    assert len(workers) == 2 and not any(alive(pid) for pid in workers)


# ------------------------------------------------------------------------------------------------- signals


@POSIX_FORK
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize(
    ("signum", "to_group", "code", "message"),
    [
        (signal.SIGINT, True, 130, "mpdoctor: interrupted"),  # Ctrl-C at a terminal: the whole process group
        (signal.SIGINT, False, 130, "mpdoctor: interrupted"),
        (signal.SIGTERM, True, 143, "mpdoctor: terminated (SIGTERM)"),  # `timeout`, a CI runner cancelling
    ],
    ids=["ctrl-c", "sigint-to-mpdoctor", "sigterm-to-group"],
)
def test_a_signal_ends_every_worker_with_the_signals_exit_code(tmp_path, signum, to_group, code, message):
    model_files(tmp_path / "models", 60)
    pids = tmp_path / "pids"
    behaviour = (
        "def behaviour(shown):\n"
        f"    open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        "    time.sleep(3600 if os.getpid() != PARENT else 0)\n"
        "PARENT = os.getpid()"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", DRIVER.format(behaviour=behaviour), "check", "--no-trace", "--jobs", "2", "models"],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a shell gives a command
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    workers: set[int] = set()
    try:

        def both_workers_busy():
            workers.update(int(pid) for pid in pids.read_text().split()) if pids.exists() else None
            return len(workers) == 2

        wait_for(both_workers_busy, 120, "both workers to check a file")
        if to_group:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == code and stderr == message + "\n"
        assert process.pid not in workers and not any(alive(pid) for pid in workers)
        assert not _session_members(process.pid)  # nothing of the run is left
    finally:
        process.kill()
        for pid in workers:
            kill_quietly(pid)


def _session_members(session: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and alive(int(name)):
            try:
                stat = Path(f"/proc/{name}/stat").read_bytes()
            except OSError:
                continue
            if int(stat[stat.rfind(b")") + 2 :].split()[3]) == session:
                found.append(int(name))
    return found


# ------------------------------------------------------------------------------------------- the pool itself


@POSIX_FORK
def test_results_come_in_order_from_several_workers_even_when_late_chunks_finish_first():
    def slow_at_first(n: int) -> tuple[int, int]:
        if n < 5:  # the first chunk finishes last
            time.sleep(0.5)
        return n, os.getpid()

    results = list(results_in_order(slow_at_first, [(n,) for n in range(100)], [1] * 100, 2))
    assert [n for n, _pid in results] == list(range(100))
    assert len({pid for _n, pid in results}) == 2 and os.getpid() not in {pid for _n, pid in results}


@POSIX_FORK
def test_a_workers_exception_is_raised_in_the_parent_as_the_same_type():
    def fails_on_7(n: int) -> int:
        if n == 7:
            raise KeyError("seven")
        return n

    with pytest.raises(KeyError, match="seven"):
        list(results_in_order(fails_on_7, [(n,) for n in range(20)], [1] * 20, 2))


@POSIX_FORK
def test_a_worker_killed_in_the_pool_raises_worker_died():
    def dies_on_3(n: int) -> int:
        if n == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return n

    sizes = [1, 1, 1, 100] + [1] * 16  # file 4 is bigger than a chunk: a chunk of its own
    with pytest.raises(
        WorkerDied, match=r"^a static worker process \(pid \d+, killed by SIGKILL\) died while checking file 4$"
    ):
        list(results_in_order(dies_on_3, [(n,) for n in range(20)], sizes, 2))


def test_chunks_cover_every_file_once_in_order_and_shrink_as_the_work_runs_out():
    sizes = [100] * 1000 + [50_000] + [10] * 500
    chunks = chunks_of(sizes, 2)
    assert [i for chunk in chunks for i in chunk] == list(range(len(sizes)))
    assert chunks == chunks_of(sizes, 2)  # deterministic
    assert range(1000, 1001) in chunks  # a file above the chunk size is a chunk of its own
    even = [len(chunk) for chunk in chunks_of([1] * 2000, 2)]
    assert even[0] == 2000 // 8  # a quarter of the work per worker
    assert even == sorted(even, reverse=True) and even[-2] == 2000 // 128  # down to a 64th of it per worker


def test_few_files_or_one_job_stay_in_this_process():
    many = [static_workers.MIN_PARALLEL_CHARACTERS] * 10
    assert plan_workers(1, many) == (1, None)
    assert plan_workers(2, [static_workers.MIN_PARALLEL_CHARACTERS * 10]) == (1, None)  # one file
    assert plan_workers(2, [100] * 10) == (1, None)  # too little to check
    if static_workers.fork_problem() is None:
        assert plan_workers(4, many) == (4, "static pass in 4 worker processes")
        assert plan_workers(32, many[:3])[0] == 3  # never more workers than files


def test_a_process_running_threads_does_not_fork():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        workers, note = plan_workers(2, [static_workers.MIN_PARALLEL_CHARACTERS] * 10)
    finally:
        stop.set()
        thread.join()
    assert workers == 1 and note.startswith("static pass in one process: ")
