"""TensorFlow imported once (issue 17): the trace children are forks of a server that imported TensorFlow, and each
file starts as clean as in a process of its own: what one file does to the global policy, Keras's registries and
config does not reach the next; `MPDOCTOR_FORK_SERVER=0` gives a process per file."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from trace_support import trace_check

pytest.importorskip("tensorflow")

from mpdoctor.facts.trace_request import NumericsRequest
from mpdoctor.trace import forkserver

NO_NUMERICS = NumericsRequest(enabled=False)  # the fork server is under test, not the numerics

RECORDER = """
import json, os
import tensorflow as tf
import keras

def record(name):
    with open({out!r} + "/" + name + ".json", "w") as handle:
        json.dump({{
            "ppid": os.getppid(),
            "policy": keras.mixed_precision.global_policy().name,
            "floatx": keras.config.floatx(),
            "registered": "Leaky>Scale" in keras.saving.get_custom_objects(),
            "keras": tf.keras.__name__,
        }}, handle)
"""

MESSY = """
keras.mixed_precision.set_global_policy("mixed_float16")
keras.config.set_floatx("float64")

@keras.saving.register_keras_serializable(package="Leaky")
class Scale(keras.layers.Layer):
    def call(self, x):
        return x * 2.0

record("messy")
model = keras.Sequential([keras.Input((3,)), Scale(), keras.layers.Dense(2, dtype="float32")])
"""

CLEAN = """
record("clean")
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
"""


def _script(directory: Path, name: str, body: str, out: Path, prologue: str = "") -> Path:
    path = directory / f"{name}.py"
    path.write_text(prologue + textwrap.dedent(RECORDER.format(out=str(out))) + textwrap.dedent(body))
    return path


def _server_pids() -> set[int]:
    return {server._process.pid for server in forkserver._servers.values() if server.alive}


def test_each_file_is_a_fork_of_one_server_and_starts_clean(tmp_path):
    out = tmp_path / "records"
    out.mkdir()
    trace_check(_script(tmp_path, "messy", MESSY, out), legacy=False, numerics=NO_NUMERICS)
    trace_check(_script(tmp_path, "clean", CLEAN, out), legacy=False, numerics=NO_NUMERICS)
    messy = json.loads((out / "messy.json").read_text())
    clean = json.loads((out / "clean.json").read_text())
    assert messy["ppid"] == clean["ppid"] in _server_pids()  # both forked by the same live server
    assert messy["ppid"] != os.getpid()
    assert (messy["policy"], messy["floatx"], messy["registered"]) == ("mixed_float16", "float64", True)
    assert (clean["policy"], clean["floatx"], clean["registered"]) == ("float32", "float32", False)


def _legacy_script(directory: Path, out: Path) -> Path:
    """A recorder script that turns on TF_USE_LEGACY_KERAS itself and uses tf.keras only."""
    prologue = 'import os\nos.environ["TF_USE_LEGACY_KERAS"] = "1"\n'
    body = 'record("legacy")\nmodel = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])\n'
    script = _script(directory, "legacy", body, out, prologue).read_text().replace("import keras\n", "")
    script = script.replace("keras.mixed_precision", "tf.keras.mixed_precision").replace("keras.config.floatx()", "0")
    script = script.replace('"Leaky>Scale" in keras.saving.get_custom_objects()', "False")
    (directory / "legacy.py").write_text(script)
    return directory / "legacy.py"


def test_a_file_that_asks_for_tf_keras_gets_a_server_that_imported_tf_keras(tmp_path):
    out = tmp_path / "records"
    out.mkdir()
    trace_check(_legacy_script(tmp_path, out), legacy=False, numerics=NO_NUMERICS)
    record = json.loads((out / "legacy.json").read_text())
    assert record["keras"].startswith("tf_keras"), record
    assert record["ppid"] in _server_pids()


def test_a_jobs_run_starts_the_server_of_each_environment_before_its_files_are_traced(tmp_path, monkeypatch):
    """--jobs 2 starts the Keras 3 and the tf_keras server side by side up front, not when the tf_keras file comes
    up; each file's child is then forked from the server started for it (the environment computed ahead is the one
    the trace asks for: no third server)."""
    from mpdoctor.config import Config
    from mpdoctor.engine import TraceOptions, check_paths

    out = tmp_path / "records"
    out.mkdir()
    files = [_script(tmp_path, "a", CLEAN, out), _script(tmp_path, "b", CLEAN, out), _legacy_script(tmp_path, out)]
    forkserver.close_all()
    events, started = [], []
    original_init, original_spawn = forkserver.ForkServer.__init__, forkserver.ForkServer.spawn

    def init(self, env):
        original_init(self, env)
        events.append("start")
        started.append(self._process.pid)

    def spawn(self, *args):
        events.append("spawn")
        return original_spawn(self, *args)

    monkeypatch.setattr(forkserver.ForkServer, "__init__", init)
    monkeypatch.setattr(forkserver.ForkServer, "spawn", spawn)
    (tmp_path / "a.py").write_text((tmp_path / "a.py").read_text().replace('record("clean")', 'record("a")'))
    (tmp_path / "b.py").write_text((tmp_path / "b.py").read_text().replace('record("clean")', 'record("b")'))
    report = check_paths(files, Config(), TraceOptions(enabled=True, jobs=2, timeout=300))
    assert [t.status for t in report.traces] == ["ok", "ok", "ok"], report.traces
    assert events == ["start", "start", "spawn", "spawn", "spawn"]
    parents = [json.loads((out / f"{name}.json").read_text())["ppid"] for name in ("a", "b", "legacy")]
    assert parents == [started[0], started[0], started[1]], (started, parents)


class _StandIn:
    def __init__(self, idle: bool) -> None:
        self.idle, self.alive, self.closed = idle, True, False

    def close(self) -> None:
        self.closed = True


def test_room_for_another_environment_is_made_only_by_closing_an_idle_server(monkeypatch):
    busy = {key: _StandIn(idle=False) for key in "abc"}
    monkeypatch.setattr(forkserver, "_servers", dict(busy))
    assert not forkserver._make_room()  # closing one would kill a running trace: a process per file instead
    assert not any(server.closed for server in busy.values()) and len(forkserver._servers) == 3

    servers = {"a": _StandIn(idle=False), "b": _StandIn(idle=True), "c": _StandIn(idle=True)}
    monkeypatch.setattr(forkserver, "_servers", dict(servers))
    assert forkserver._make_room()
    assert [key for key, server in servers.items() if server.closed] == ["b"]  # the oldest idle one only
    assert list(forkserver._servers) == ["a", "c"]


def test_a_dead_server_is_replaced_and_the_switch_turns_it_off(tmp_path, monkeypatch):
    out = tmp_path / "records"
    out.mkdir()
    clean = _script(tmp_path, "clean", CLEAN, out)
    trace_check(clean, legacy=False, numerics=NO_NUMERICS)
    first = json.loads((out / "clean.json").read_text())["ppid"]
    os.kill(first, 9)
    trace_check(clean, legacy=False, numerics=NO_NUMERICS)  # still traced: a new server or its own process
    assert json.loads((out / "clean.json").read_text())["ppid"] != first
    trace_check(clean, legacy=False, numerics=NO_NUMERICS)
    second = json.loads((out / "clean.json").read_text())["ppid"]
    assert second != first and second in _server_pids()

    monkeypatch.setenv("MPDOCTOR_FORK_SERVER", "0")
    trace_check(clean, legacy=False, numerics=NO_NUMERICS)
    assert json.loads((out / "clean.json").read_text())["ppid"] == os.getpid()  # a process of its own
