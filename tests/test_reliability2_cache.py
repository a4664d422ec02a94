"""Issue 32, the cache and the fork server (reproductions 01, 05, 06, 07, 08 of ../shared/repros/reliability-2):
a trace child whose fork server dies is still supervised and ended; the cache reads only regular files, bounded;
its key covers what the run read (variables, tested paths, keras.json); a fix is replayed only when the static pass
derives it from the source again, and an entry is checked against its schema; the directory markers only go into a
directory mpdoctor created."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from test_reliability import ROOT

from mpdoctor import cache as cache_module
from mpdoctor.cache import NotCacheable, ResultCache
from mpdoctor.config import Config
from mpdoctor.diagnostics import Diagnostic, Edit, Fix, Location, Severity
from mpdoctor.engine import TraceOptions
from mpdoctor.facts.schema import Lookups, TraceSummary

MODEL = textwrap.dedent("""\
    import keras
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    """)
FIXED = Diagnostic(
    "MP401",
    "softmax in float16",
    Location("m.py", 3, 46),
    Severity.ERROR,
    fix=Fix("set dtype", (Edit("m.py", 3, 88, 3, 88, ', dtype="float32"'),)),
)


def run(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`mpdoctor ARGS` in a process of its own, with the cache allowed (the suite turns it off), bounded in time."""
    environment = {k: v for k, v in os.environ.items() if k not in ("MPDOCTOR_NO_CACHE", "MPDOCTOR_CACHE_DIR")}
    environment.update(env or {}, PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "mpdoctor", *args]
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout)


def cache_note(result: subprocess.CompletedProcess) -> str:
    return next((line for line in result.stderr.splitlines() if line.startswith("mpdoctor: cache:")), "")


def _cache(tmp_path: Path) -> ResultCache:
    return ResultCache(tmp_path / "cache", Config(root=tmp_path), TraceOptions(enabled=True))


def _summary(inputs=(), lookups: Lookups | None = None) -> TraceSummary:
    return TraceSummary(path="m.py", inputs=list(inputs), lookups=lookups or Lookups())


# ----------------------------------------------------------------------------------------- 01: the fork server


@pytest.mark.usefixtures("tensorflow")
def test_R01_a_child_whose_fork_server_dies_is_supervised_and_ended(tmp_path):
    """The child kills its fork server and spins: it is bounded by --trace-timeout and ended with mpdoctor; a file
    traced beside it (same server) gets its real result, not a false MP001."""
    (tmp_path / "spin.py").write_text(
        "import keras, os, signal, time\ntime.sleep(2)\nos.kill(os.getppid(), signal.SIGKILL)\n"
        "while True:\n    time.sleep(1)\n"
    )
    (tmp_path / "m.py").write_text("import time\n" + MODEL.replace("model =", "time.sleep(6)\nmodel ="))
    mark = f"MPD_TEST_R01_{os.getpid()}"
    result = run(
        "check", "--no-cache", "-j", "2", "--trace-timeout", "20", "spin.py", "m.py", cwd=tmp_path, env={mark: "1"}
    )
    time.sleep(1)
    left = [p for p in os.listdir("/proc") if p.isdigit() and _has_mark(p, mark)]
    for pid in left:
        os.kill(int(pid), 9)
    assert left == [], "trace processes outlived mpdoctor"
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("m.py:") and "MP401" in line for line in lines), result.stdout
    assert not any(line.startswith("m.py:") and "MP001" in line for line in lines), result.stdout
    assert any(line.startswith("spin.py:") and "MP001" in line and "timeout 20 s" in line for line in lines), (
        result.stdout
    )


@pytest.mark.usefixtures("tensorflow")
def test_R01_a_server_killed_from_outside_leaves_its_child_its_real_result(tmp_path):
    """`kill -9` of the fork server (or the OOM killer) while a file is traced: the file's trace goes on, adopted,
    and ends with its own result."""
    from mpdoctor.trace import forkserver, runner

    path = tmp_path / "slow.py"
    path.write_text("import time\n" + MODEL.replace("model =", "time.sleep(8)\nmodel ="))
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(outcome=runner.run_trace(str(path), timeout=120)))
    thread.start()
    deadline = time.monotonic() + 240
    server = None
    while server is None and time.monotonic() < deadline and thread.is_alive():
        server = next((s for s in list(forkserver._servers.values()) if s._running), None)
        time.sleep(0.1)
    assert server is not None, "no fork server ran the trace"
    time.sleep(1)
    os.kill(server._process.pid, signal.SIGKILL)
    thread.join(timeout=240)
    assert not thread.is_alive()
    outcome = result["outcome"]
    assert outcome.failure is None, outcome.failure
    assert outcome.facts.status == "ok" and outcome.facts.models


def _has_mark(pid: str, mark: str) -> bool:
    try:
        return f"{mark}=1".encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


# ------------------------------------------------------------------------------------- 05: special files


def test_R05_inputs_that_are_no_regular_files_are_not_cacheable(tmp_path):
    fifo = tmp_path / "data.txt"
    os.mkfifo(fifo)
    (tmp_path / "seed.bin").symlink_to("/dev/urandom")
    for path in (fifo, tmp_path / "seed.bin"):
        with pytest.raises(NotCacheable):
            cache_module.fingerprint(str(path))
    cache = _cache(tmp_path)
    cache.store("a" * 64, [], None, [_summary([str(tmp_path / "seed.bin")])], started=0.0)
    assert not cache.holds("a" * 64)
    regular = tmp_path / "regular.txt"
    regular.write_text("x")
    os.utime(regular, (1, 1))
    cache.store("b" * 64, [], None, [_summary([str(regular)])], started=100.0)
    assert cache.load("b" * 64, "m.py") is not None
    regular.unlink()
    os.mkfifo(regular)  # the input became a FIFO: a miss, at once
    assert cache.load("b" * 64, "m.py") is None


@pytest.mark.parametrize("replacement", ["fifo", "/dev/zero", "/dev/urandom", "oversized"])
def test_R05_an_entry_that_is_no_regular_file_or_too_large_is_a_miss(tmp_path, monkeypatch, replacement):
    cache = _cache(tmp_path)
    cache.store("c" * 64, [], None, [_summary()], started=0.0)
    entry = cache._entry("c" * 64)
    assert cache.load("c" * 64, "m.py") is not None
    if replacement == "oversized":
        monkeypatch.setattr(cache_module, "ENTRY_LIMIT", 16)
    else:
        entry.unlink()
        if replacement == "fifo":
            os.mkfifo(entry)
        else:
            entry.symlink_to(replacement)
    assert cache.load("c" * 64, "m.py") is None
    assert not cache.holds("c" * 64) or replacement == "oversized"


@pytest.mark.usefixtures("tensorflow")
def test_R05_a_traced_file_reading_special_files_neither_hangs_nor_exhausts_memory(tmp_path):
    (tmp_path / "data.txt").write_text("mixed_float16\n")
    (tmp_path / "f.py").write_text(
        'import keras, os\np = open("data.txt").read().strip() if os.path.isfile("data.txt") else "float32"\n'
        "keras.mixed_precision.set_global_policy(p)\n" + MODEL.splitlines()[2] + "\n"
    )
    first = run("check", "-v", "f.py", cwd=tmp_path)
    assert first.returncode == 1 and "MP401" in first.stdout, first.stderr
    (tmp_path / "data.txt").unlink()
    os.mkfifo(tmp_path / "data.txt")
    second = run("check", "-v", "f.py", cwd=tmp_path, timeout=120)  # a hang fails by the timeout
    assert second.returncode == 0 and "checked again: f.py" in cache_note(second), second.stderr
    (tmp_path / "seed.bin").symlink_to("/dev/urandom")
    (tmp_path / "u.py").write_text(MODEL + 'seed = open("seed.bin", "rb").read(16)\n')
    urandom = run("check", "-v", "u.py", cwd=tmp_path, timeout=120)
    assert urandom.returncode == 1 and "internal error" not in urandom.stderr, urandom.stderr
    assert "MP401" in urandom.stdout


# -------------------------------------------------------------------------------- 06: what the run read


def test_R06_the_child_records_variables_tested_paths_and_listings(tmp_path):
    """The recorder of the trace child (mpdoctor.trace.child.inputs), in a process of its own."""
    script = textwrap.dedent("""\
        import json, os, sys
        from mpdoctor.facts.schema import new_facts
        from mpdoctor.trace.child import inputs
        inputs.start()
        os.environ["SET_FIRST"] = "1"
        os.environ.get("SET_FIRST")
        os.getenv("READ_ME")
        os.getenvb(b"READ_AS_BYTES")
        "ABSENT_ONE" in os.environ
        os.path.isfile("flag")
        os.listdir(".")
        with inputs.unrecorded():
            os.environ.get("NOT_THIS")
        facts = new_facts()
        files = inputs.collect(facts, "m.py", sys.argv[1])
        print(json.dumps({"files": files, "lookups": facts.lookups.to_json()}))
        """)
    env = dict(os.environ, PYTHONPATH=str(ROOT), READ_ME="value", NOT_THIS="x", READ_AS_BYTES="b")
    env.pop("ABSENT_ONE", None)
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "scratch")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    lookups = json.loads(out)["lookups"]
    assert lookups["environment"]["READ_ME"] == cache_module.hashlib.sha256(b"value").hexdigest()
    assert lookups["environment"]["ABSENT_ONE"] is None
    assert lookups["environment"]["READ_AS_BYTES"] == cache_module.hashlib.sha256(b"b").hexdigest()
    assert "SET_FIRST" not in lookups["environment"]  # set by the run before it read it
    assert "NOT_THIS" not in lookups["environment"]
    assert str(tmp_path / "flag") in lookups["probed"]
    assert str(tmp_path) in lookups["listed"]


def test_R06_a_variable_a_tested_path_or_a_listing_that_changed_is_a_miss(tmp_path, monkeypatch):
    monkeypatch.setenv("POLICY", "float32")
    cache = _cache(tmp_path)
    folder = tmp_path / "data"
    folder.mkdir()
    lookups = Lookups(
        probed=[str(tmp_path / "flag")],
        listed=[str(folder)],
        environment={"POLICY": cache_module.environment_print("POLICY"), "UNSET": None},
    )
    cache.store("d" * 64, [], None, [_summary(lookups=lookups)], started=time.time() + 10)
    assert cache.load("d" * 64, "m.py") is not None
    monkeypatch.setenv("POLICY", "mixed_float16")
    assert cache.load("d" * 64, "m.py") is None
    monkeypatch.setenv("POLICY", "float32")
    monkeypatch.setenv("UNSET", "now set")
    assert cache.load("d" * 64, "m.py") is None
    monkeypatch.delenv("UNSET")
    assert cache.load("d" * 64, "m.py") is not None
    (tmp_path / "flag").write_text("")
    assert cache.load("d" * 64, "m.py") is None
    (tmp_path / "flag").unlink()
    (folder / "new.csv").write_text("")
    assert cache.load("d" * 64, "m.py") is None


def test_R06_what_the_run_read_unknown_is_not_stored(tmp_path):
    cache = _cache(tmp_path)
    cache.store("e" * 64, [], None, [TraceSummary(path="m.py", inputs=[], lookups=None)], started=0.0)
    assert not cache.holds("e" * 64)


@pytest.mark.usefixtures("tensorflow")
def test_R06_a_cached_run_sees_variables_tested_files_and_keras_json(tmp_path):
    (tmp_path / "e.py").write_text(
        'import os, keras\nkeras.mixed_precision.set_global_policy(os.environ.get("POLICY", "float32"))\n'
        + MODEL.splitlines()[2]
        + "\n"
    )
    assert run("check", "-q", "e.py", cwd=tmp_path, env={"POLICY": "float32"}).returncode == 0
    assert run("check", "-q", "e.py", cwd=tmp_path, env={"POLICY": "mixed_float16"}).returncode == 1

    (tmp_path / "t.py").write_text(
        "import os, keras\n"
        + 'keras.mixed_precision.set_global_policy(["float32", "mixed_float16"][os.path.exists("amp.flag")])\n'
        + MODEL.splitlines()[2]
        + "\n"
    )
    assert run("check", "-q", "t.py", cwd=tmp_path).returncode == 0
    (tmp_path / "amp.flag").write_text("")
    assert run("check", "-q", "t.py", cwd=tmp_path).returncode == 1

    home = tmp_path / "kh"
    home.mkdir()
    config = {"floatx": "float32", "epsilon": 1e-07, "backend": "tensorflow", "image_data_format": "channels_last"}
    (home / "keras.json").write_text(json.dumps(config))
    (tmp_path / "k.py").write_text("import keras\n" + MODEL.splitlines()[2] + "\n")
    env = {"KERAS_HOME": str(home)}
    assert run("check", "-q", "k.py", cwd=tmp_path, env=env).returncode == 0
    (home / "keras.json").write_text(json.dumps(dict(config, floatx="float16")))
    cached = run("check", "-q", "k.py", cwd=tmp_path, env=env).returncode
    assert cached == run("check", "-q", "--no-cache", "k.py", cwd=tmp_path, env=env).returncode == 1


# ------------------------------------------------------------------------------------------ 07: entries


def test_R07_a_fix_is_replayed_only_as_the_static_pass_derives_it(tmp_path):
    cache = _cache(tmp_path)
    cache.store("f" * 64, [FIXED], None, [_summary()], started=0.0, rederive=lambda: [FIXED])
    assert cache.load("f" * 64, "m.py", lambda: [FIXED]) == ([FIXED], None, [_summary()])
    assert cache.load("f" * 64, "m.py") is None  # nothing to compare the fix with: a miss
    entry = cache._entry("f" * 64)
    data = json.loads(entry.read_text())
    data["result"]["diagnostics"][0]["fix"]["edits"][0]["content"] = "import os; os.system('x')\n"
    entry.write_text(json.dumps(data))
    assert cache.load("f" * 64, "m.py", lambda: [FIXED]) is None
    # A fix only the trace derives (none from the static pass) is not stored.
    cache.store("g" * 64, [FIXED], None, [_summary()], started=0.0, rederive=list)
    assert not cache.holds("g" * 64)


@pytest.mark.parametrize(
    "forge",
    [
        lambda d: d["diagnostics"][0].update(severity="fatal"),
        lambda d: d["diagnostics"][0]["location"].update(line="3"),
        lambda d: d["diagnostics"][0].update(passes="static"),
        lambda d: d["diagnostics"][0].update(code=None),
        lambda d: d.update(error={"path": 5, "message": "m"}),
        lambda d: d.update(inputs=[[3]]),
        lambda d: d["traces"][0].update(status=["ok"]),
    ],
)
def test_R07_an_entry_is_checked_against_its_schema(tmp_path, forge):
    plain = Diagnostic("MP401", "softmax in float16", Location("m.py", 3, 46), Severity.ERROR)
    cache = _cache(tmp_path)
    cache.store("h" * 64, [plain], None, [_summary()], started=0.0)
    assert cache.load("h" * 64, "m.py") == ([plain], None, [_summary()])
    entry = cache._entry("h" * 64)
    data = json.loads(entry.read_text())
    forge(data["result"])
    entry.write_text(json.dumps(data))
    assert cache.load("h" * 64, "m.py") is None


@pytest.mark.usefixtures("tensorflow")
def test_R07_a_fix_planted_in_an_entry_is_neither_written_nor_run(tmp_path):
    (tmp_path / "m.py").write_text(MODEL)
    first = run("check", "-v", "m.py", cwd=tmp_path)
    assert first.returncode == 1 and "MP401 [*]" in first.stdout, first.stderr
    assert "1 of 1" in cache_note(run("check", "-v", "m.py", cwd=tmp_path))  # a fix that repeats is replayed
    (entry,) = (tmp_path / ".mpdoctor_cache").glob("*/*.json")
    data = json.loads(entry.read_text())
    planted = f"import os; open({str(tmp_path / 'PWNED')!r}, 'a').write('ran')  # injected\n"
    fixed = [d for d in data["result"]["diagnostics"] if d.get("fix")]
    assert fixed
    for d in fixed:
        d["fix"]["edits"].append(
            {"path": "m.py", "line": 1, "column": 1, "end_line": 1, "end_column": 1, "content": planted}
        )
    entry.write_text(json.dumps(data))
    run("check", "--fix", "m.py", cwd=tmp_path)
    assert "injected" not in (tmp_path / "m.py").read_text()
    assert not (tmp_path / "PWNED").exists()
    assert 'dtype="float32"' in (tmp_path / "m.py").read_text()  # the real fix, derived again


# ---------------------------------------------------------------------------------------- 08: markers


def test_R08_markers_only_in_a_directory_mpdoctor_created(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "m.py").write_text("x = 1\n")
    (tmp_path / "link").symlink_to(project)
    for given in (project, tmp_path / "link"):  # `cache-dir = "."`, a link to a user's folder
        cache = ResultCache(given, Config(root=tmp_path), TraceOptions(enabled=True))
        cache.store("i" * 64, [], None, [_summary()], started=0.0)
        assert sorted(os.listdir(project)) == ["m.py"]
        assert "not created by mpdoctor" in (cache.problem or "")
    fresh = tmp_path / "build" / "mpd"
    cache = ResultCache(fresh, Config(root=tmp_path), TraceOptions(enabled=True))
    cache.store("i" * 64, [], None, [_summary()], started=0.0)
    assert (fresh / "CACHEDIR.TAG").read_text() == cache_module._TAG
    assert (fresh / ".gitignore").read_text().splitlines()[-1] == "*"
    assert cache.load("i" * 64, "m.py") is not None and cache.problem is None
    again = ResultCache(fresh, Config(root=tmp_path), TraceOptions(enabled=True))  # mpdoctor's: used as it is
    again.store("j" * 64, [], None, [_summary()], started=0.0)
    assert again.holds("j" * 64) and again.problem is None
    assert not [p for p in (tmp_path / "build").iterdir() if p.name != "mpd"]  # no staging folder left


@pytest.mark.usefixtures("tensorflow")
def test_R08_cache_dir_dot_leaves_the_project_alone(tmp_path):
    (tmp_path / "m.py").write_text(MODEL)
    (tmp_path / "pyproject.toml").write_text('[tool.mpdoctor]\ncache-dir = "."\n')
    result = run("check", "-v", "m.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert sorted(os.listdir(tmp_path)) == ["m.py", "pyproject.toml"]
    assert "not created by mpdoctor" in cache_note(result)


def test_R06_variables_read_from_cpp_are_in_the_key(tmp_path, monkeypatch):
    """TensorFlow's C++ reads TF_*/XLA_*/... with getenv, which the child cannot see: they are keyed by prefix."""

    def key() -> str:
        return _cache(tmp_path).key("m.py", tmp_path / "m.py", "import keras\n", None, None)

    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    base = key()
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    assert key() != base
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS")
    monkeypatch.setenv("UNRELATED_TO_TENSORFLOW", "1")
    assert key() == base
