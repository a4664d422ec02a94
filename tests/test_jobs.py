"""`check --jobs N` (issue 17): files traced N at once give the report of one at a time, in the same order, and
Ctrl-C ends every trace child still running."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import mpdoctor
from test_reliability import MODEL, ROOT, alive, kill_quietly, one_line_errors, wait_for
from test_reliability_tf import _record_line
from trace_helpers import FIND_RESULT_PATH

pytest.importorskip("tensorflow")

GOLDEN = Path(__file__).parent / "golden" / "inputs"


def test_jobs_change_nothing_in_the_report(tmp_path):
    for name in ("loss_and_outputs.py", "broken_and_missing.py", "softmax_notebook.ipynb"):
        shutil.copy(GOLDEN / name, tmp_path / name)
    reports = {}
    for jobs in ("1", "3"):
        result = mpdoctor("check", "--jobs", jobs, "--format", "json", ".", cwd=tmp_path)
        assert result.returncode in (1, 2), result.stderr
        reports[jobs] = json.loads(result.stdout)
    for key in ("diagnostics", "errors", "summary", "files"):
        assert reports["1"][key] == reports["3"][key], key
    assert [t["path"] for t in reports["1"]["traces"]] == [t["path"] for t in reports["3"]["traces"]]
    assert reports["1"]["diagnostics"]  # the inputs have findings of both passes
    assert {p for d in reports["1"]["diagnostics"] for p in d["passes"]} >= {"static", "trace"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals as on POSIX")
def test_ctrl_c_ends_every_child_of_a_parallel_run(tmp_path):
    records = [tmp_path / f"record{i}" for i in (1, 2)]
    for index, record in enumerate(records, start=1):
        (tmp_path / f"spin{index}.py").write_text(
            MODEL + FIND_RESULT_PATH + "import os, sys\n"
            f"open({str(record)!r}, 'w').write(f'{{os.getpid()}} {{os.path.dirname(RESULT_PATH)}}')\n"
            "while True:\n    pass\n"
        )
    process = subprocess.Popen(
        [sys.executable, "-m", "mpdoctor", "check", "--trace", "--jobs", "2", "spin1.py", "spin2.py"],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    try:
        lines = [wait_for(lambda r=r: _record_line(r), 300, "both files to run at once") for r in records]
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 130, stderr
        one_line_errors(stderr)
        for pid, folder in lines:
            assert not alive(int(pid)) and not os.path.exists(folder)
    finally:
        process.kill()
        for record in records:
            line = _record_line(record)
            if line:
                kill_quietly(int(line[0]))


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_bad_jobs_value_is_a_usage_error(tmp_path, value):
    result = mpdoctor("check", "--no-trace", "--jobs", value, ".", cwd=tmp_path)
    assert result.returncode == 2 and "--jobs" in result.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sweep reads /proc")
@pytest.mark.parametrize("spared", [True, False])
def test_a_trace_that_ends_spares_a_fork_server_started_meanwhile(spared):
    """A server started for another environment while a trace runs (--jobs 2 over a Keras 3 and a tf_keras file) is
    a child of mpdoctor started after that trace's child: the trace's end must not sweep it up as an orphan of its
    model code. Unspared, such a process is swept (the sweep is real)."""
    from mpdoctor.trace.processes import ProcessTree, spare

    with ProcessTree([sys.executable, "-c", "import time; time.sleep(1)"], env=dict(os.environ)) as tree:
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        if spared:
            spare(helper.pid)
        tree.supervise(30)
    try:
        if not spared:  # the sweep kills it as the tree ends; give the kill a moment to land
            wait_for(lambda: helper.poll() is not None, 10, "the unspared process to be swept")
        assert (helper.poll() is None) is spared
    finally:
        kill_quietly(helper.pid)
        helper.wait()
