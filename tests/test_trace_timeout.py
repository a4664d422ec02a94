"""Issue 14 item 7, the parts that need no TensorFlow: at the timeout the runner asks the trace child to stop and
gives it a grace period to write what it gathered (then ends it either way, leaving nothing running), and a child
that stopped gets the trace findings of its partial facts plus one MP001 naming where time ran out. The real runs,
in both Keras versions, are in test_trace_real_code.py (item 7)."""

from __future__ import annotations

import signal
import sys
import time

import pytest
from test_reliability import alive

from mpdoctor.config import Config
from mpdoctor.facts.schema import Facts
from mpdoctor.trace import checks
from mpdoctor.trace.checks import diagnose, verdicts
from mpdoctor.trace.processes import ProcessTree
from mpdoctor.trace_context import TraceContext

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals and /proc as on Linux")

# A stand-in child: on SIGUSR1 it writes "stopped" to argv[1] and exits (`handles`), or it ignores the signal.
_CHILD = """
import signal, sys, time
def stop(*_):
    open(sys.argv[1], "w").write("stopped")
    sys.exit(0)
signal.signal(signal.SIGUSR1, stop if sys.argv[2] == "handles" else signal.SIG_IGN)
open(sys.argv[1] + ".ready", "w").write("")
while True:
    time.sleep(0.05)
"""


def _supervised(tmp_path, behaviour: str):
    out = tmp_path / "out"
    tree = ProcessTree([sys.executable, "-c", _CHILD, str(out), behaviour], env={})
    with tree:
        started = time.monotonic()
        while not (tmp_path / "out.ready").exists():  # the handler is installed before the timeout
            assert time.monotonic() - started < 60
            time.sleep(0.05)
        ending = tree.supervise(0.3, stop_signal=signal.SIGUSR1, stop_grace=1.5)
        took = time.monotonic() - started
    return ending, out, tree.pid, took


def test_a_child_asked_to_stop_at_the_timeout_writes_what_it_has_and_exits(tmp_path):
    ending, out, pid, _took = _supervised(tmp_path, "handles")
    assert out.read_text() == "stopped"
    assert ending.returncode == 0 and "did not finish within 0.3 s" in ending.failure
    assert not alive(pid)


def test_a_child_that_ignores_the_request_is_ended_after_the_grace_period(tmp_path):
    ending, out, pid, took = _supervised(tmp_path, "ignores")
    assert not out.exists() and ending.returncode == -signal.SIGKILL and "did not finish" in ending.failure
    assert took >= 1.5 and not alive(pid)


def _stopped_facts(location: dict | None, phase: str = "import") -> Facts:
    return Facts.from_json(
        {"status": "timeout", "timeout": {"phase": phase, "location": location}, "environment": {"keras_major": 3}}
    )


def test_a_stopped_trace_reports_where_time_ran_out_at_that_line(tmp_path):
    model = tmp_path / "model.py"
    model.write_text("import time\nwhile True:\n    time.sleep(0.1)\n")
    ctx = TraceContext(str(model), "model.py", model.read_text(), None)
    failure = "the model code did not finish within 8 s (--trace-timeout)"
    found = diagnose(_stopped_facts({"file": str(model), "line": 3}), failure, "", ctx, Config(), timeout=8)
    [mp001] = [d for d in found if d.code == "MP001"]
    assert mp001.location.line == 3 and mp001.severity.value == "error"
    assert mp001.message.startswith("the trace ran out of time at line 3 of model.py (timeout 8 s); findings above")
    # no line of the file was running (the numerics of a model): the phase instead, never a wrong line
    found = diagnose(_stopped_facts(None, "analysis"), failure, "", ctx, Config(), timeout=8)
    [mp001] = [d for d in found if d.code == "MP001"]
    assert mp001.location.line == 1 and "ran out of time while its models were analysed" in mp001.message


def test_a_child_killed_at_the_timeout_without_facts_is_still_a_trace_failure():
    ctx = TraceContext("m.py", "m.py", "", None)
    failure = "the model code did not finish within 8 s (--trace-timeout)"
    [mp001] = diagnose(None, failure, "", ctx, Config(), timeout=8)
    assert mp001.message.startswith("trace pass failed: the model code did not finish within 8 s")


class _Hook:
    codes = ("MP403",)

    @staticmethod
    def fn(_facts, _ctx):
        return {("MP403", 3): None, ("MP403", 4): ("downgrade", "why"), ("MP403", 5): ("confirm", "seen")}


def test_a_stopped_trace_confirms_static_findings_but_never_withdraws_them(monkeypatch):
    monkeypatch.setattr(checks, "hooks", lambda kind: [_Hook] if kind == "verdicts" else [])
    ctx = TraceContext("m.py", "m.py", "", None)
    assert verdicts(_stopped_facts(None), ctx, Config()) == {("MP403", 5): ("confirm", "seen")}
    complete = Facts.from_json({"environment": {"keras_major": 3}})
    assert verdicts(complete, ctx, Config()) == _Hook.fn(None, None)  # a run that finished: every verdict
