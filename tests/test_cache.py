"""The result cache (issue 17): a warm run replays each unchanged file's result exactly (every format, fixes
included) without tracing it; editing a file, a local module it imports or the checkpoint it restores traces that
file again and no other; --no-cache, MPDOCTOR_CACHE_DIR, [tool.mpdoctor] cache-dir; CACHEDIR.TAG and .gitignore;
a corrupt entry is a miss; concurrent runs leave only whole entries."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from test_cli import run_in_process
from test_reliability import ROOT

from mpdoctor import cache as cache_module
from mpdoctor.cache import ResultCache
from mpdoctor.config import Config, load_config
from mpdoctor.diagnostics import Diagnostic, Edit, FileError, Fix, Location, Severity
from mpdoctor.engine import TraceOptions, check_paths
from mpdoctor.facts.schema import Lookups, TraceSummary
from mpdoctor.report import write_report

# The cache is used when the trace pass runs (TensorFlow installed).
needs_tensorflow = pytest.mark.usefixtures("tensorflow")

HELPER = "UNITS = 4\n"
USES_HELPER = textwrap.dedent("""\
    import keras
    from helper import UNITS

    keras.mixed_precision.set_global_policy("mixed_float16")


    def build():
        inputs = keras.Input((8,))
        hidden = keras.layers.Dense(UNITS)(inputs)
        outputs = keras.layers.Dense(2, activation="softmax")(hidden)
        return keras.Model(inputs, outputs)
    """)
RESTORES = textwrap.dedent("""\
    import os

    os.environ["TF_USE_LEGACY_KERAS"] = "1"

    import tensorflow as tf

    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    model = tf.keras.Sequential([tf.keras.layers.Dense(4, input_shape=(8,)), tf.keras.layers.Dense(2)])
    tf.train.Checkpoint(model=model).read("ckpt/variables").expect_partial()
    """)
PLAIN = textwrap.dedent("""\
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    """)
# A TensorFlow checkpoint from the repository: a SavedModel's variables (restoring it matches nothing, which is the
# file's own business; writing one here would cost a TensorFlow import).
CHECKPOINT = ROOT / "examples" / "savedmodels" / "feature_extractor" / "variables"
FILES = ("plain_keras3.py", "restores_keras2.py", "uses_helper_keras3.py")
FORMATS = ("json", "text", "sarif", "html", "junit", "github", "gitlab")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """Three traced files: Keras 3 with a local module, tf_keras restoring a checkpoint, Keras 3 alone."""
    root = tmp_path_factory.mktemp("cached")
    (root / "helper.py").write_text(HELPER)
    (root / "uses_helper_keras3.py").write_text(USES_HELPER)
    (root / "restores_keras2.py").write_text(RESTORES)
    (root / "plain_keras3.py").write_text(PLAIN)
    shutil.copytree(CHECKPOINT, root / "ckpt")
    return root


class Counted:
    """Runs `check_paths` over the project with the cache, counting the trace children it starts."""

    def __init__(self, root: Path, monkeypatch) -> None:
        from mpdoctor.trace import checks, forkserver

        self.root = root
        self.traced: list[str] = []
        self.servers_started: list[str | None] = []  # TF_USE_LEGACY_KERAS of each server started ahead (--jobs 2)
        real, real_start = checks.run_trace, forkserver.start

        def counting(path, **options):
            self.traced.append(os.path.basename(path))
            return real(path, **options)

        def counting_start(env):
            self.servers_started.append(env.get("TF_USE_LEGACY_KERAS"))
            return real_start(env)

        monkeypatch.setattr(checks, "run_trace", counting)
        monkeypatch.setattr(forkserver, "start", counting_start)
        monkeypatch.chdir(root)

    def run(self):
        self.traced.clear()
        self.servers_started.clear()
        config = Config(root=self.root)
        trace = TraceOptions(enabled=True, timeout=300, numerics=config.numerics.request(), jobs=2)
        cache = ResultCache(self.root / ".mpdoctor_cache", config, trace)
        report = check_paths([Path(name) for name in FILES], config, trace, cache=cache)
        return report, cache, sorted(self.traced)


def rendered(report) -> dict[str, str]:
    outputs = {}
    for fmt in FORMATS:
        stream = io.StringIO()
        write_report(report, fmt, stream, colour=False, verbose=True)
        outputs[fmt] = stream.getvalue()
    return outputs


@needs_tensorflow
def test_a_warm_run_replays_every_format_without_tracing(project, monkeypatch):
    counted = Counted(project, monkeypatch)
    cold, cold_cache, traced = counted.run()
    assert traced == sorted(FILES)
    assert cold_cache.hits == []
    assert sorted(counted.servers_started, key=str) == sorted([None, None, "1"], key=str)  # per traced file, ahead
    assert (
        (project / ".mpdoctor_cache" / "CACHEDIR.TAG")
        .read_text()
        .startswith("Signature: 8a477f597d28d172789f06886806bc55")
    )
    assert (project / ".mpdoctor_cache" / ".gitignore").read_text().splitlines()[-1] == "*"
    warm, warm_cache, traced = counted.run()
    assert traced == []
    assert counted.servers_started == []  # nothing to trace: no TensorFlow imported for nothing
    assert sorted(warm_cache.hits) == sorted(FILES)
    assert rendered(warm) == rendered(cold)
    assert any(d.fix is not None for d in cold.diagnostics)  # fixes are replayed too (MP401's dtype="float32")
    assert {p for d in cold.diagnostics for p in d.passes} == {"static", "trace"}
    assert {t.path: t.status for t in cold.traces} == dict.fromkeys(FILES, "ok")


@needs_tensorflow
def test_an_edit_traces_exactly_the_file_it_reaches(project, monkeypatch):
    counted = Counted(project, monkeypatch)
    assert counted.run()[2] in ([], sorted(FILES))  # warm (or cold when this test runs alone)
    assert counted.run()[2] == []

    (project / "helper.py").write_text("UNITS = 6\n")  # a local module one file imports
    _report, cache, traced = counted.run()
    assert traced == ["uses_helper_keras3.py"]
    assert cache.misses == ["uses_helper_keras3.py"]

    data = next((project / "ckpt").glob("variables.data-*"))  # the checkpoint one file restores, saved again
    data.write_bytes(data.read_bytes())  # the same bytes at a new time: a fingerprint cannot know they are the same
    assert counted.run()[2] == ["restores_keras2.py"]

    plain = project / "plain_keras3.py"  # the file itself
    plain.write_text(plain.read_text() + "# edited\n")
    assert counted.run()[2] == ["plain_keras3.py"]
    assert counted.run()[2] == []


# ------------------------------------------------------------------------------------- the command line


def cli(*args, cwd: Path, env: dict | None = None):
    """`mpdoctor check ARGS` in this process with the cache allowed (the suite turns it off: tests/conftest.py)."""
    environment = {k: v for k, v in os.environ.items() if k not in ("MPDOCTOR_NO_CACHE", "MPDOCTOR_CACHE_DIR")}
    return run_in_process(["check", "-v", *args], cwd=cwd, env={**environment, **(env or {})})


def note(result) -> str | None:
    """The cache's --verbose note: "cache: H of N files from DIR..."."""
    return next((line for line in result.stderr.splitlines() if line.startswith("mpdoctor: cache:")), None)


def untraced_files(root: Path, count: int = 2) -> list[str]:
    """Files without Keras: no trace child runs, their results are cached all the same (fast to test)."""
    names = []
    for index in range(count):
        (root / f"util{index}.py").write_text(f"def helper_{index}(x):\n    return x + {index}\n")
        names.append(f"util{index}.py")
    return names


@needs_tensorflow
def test_the_default_directory_is_tagged_and_ignored(tmp_path):
    untraced_files(tmp_path)
    first = cli(".", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert note(first).startswith("mpdoctor: cache: 0 of 2 files from")
    assert (tmp_path / ".mpdoctor_cache" / "CACHEDIR.TAG").exists()
    assert (tmp_path / ".mpdoctor_cache" / ".gitignore").read_text().splitlines()[-1] == "*"
    second = cli(".", cwd=tmp_path)
    assert note(second).startswith("mpdoctor: cache: 2 of 2 files from")
    assert second.stdout == first.stdout


@needs_tensorflow
def test_no_cache_neither_reads_nor_writes(tmp_path):
    untraced_files(tmp_path)
    result = cli("--no-cache", ".", cwd=tmp_path)
    assert result.returncode == 0 and note(result) is None
    assert not (tmp_path / ".mpdoctor_cache").exists()
    result = cli(".", cwd=tmp_path, env={"MPDOCTOR_NO_CACHE": "1"})
    assert note(result) is None and not (tmp_path / ".mpdoctor_cache").exists()
    assert note(cli("--no-trace", ".", cwd=tmp_path)) is None  # the static pass alone does not use it either
    assert not (tmp_path / ".mpdoctor_cache").exists()


@needs_tensorflow
def test_where_the_cache_lives(tmp_path):
    untraced_files(tmp_path)
    from_env = cli(".", cwd=tmp_path, env={"MPDOCTOR_CACHE_DIR": str(tmp_path / "env-cache")})
    assert "env-cache" in note(from_env)
    assert (tmp_path / "env-cache" / "CACHEDIR.TAG").exists()
    option = cli("--cache-dir", "opt-cache", ".", cwd=tmp_path, env={"MPDOCTOR_CACHE_DIR": "env-cache"})
    assert "opt-cache" in note(option) and (tmp_path / "opt-cache" / "CACHEDIR.TAG").exists()
    (tmp_path / "pyproject.toml").write_text('[tool.mpdoctor]\ncache-dir = "build/mpd"\n')
    assert load_config(tmp_path).cache_dir == tmp_path / "build" / "mpd"
    configured = cli(".", cwd=tmp_path)
    assert (tmp_path / "build" / "mpd" / "CACHEDIR.TAG").exists(), configured.stderr
    assert not (tmp_path / ".mpdoctor_cache").exists()
    both = cli("--cache-dir", "x", "--no-cache", ".", cwd=tmp_path)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


@needs_tensorflow
@pytest.mark.parametrize(
    "damage",
    [b"", b"{not json", b'{"format": 1}', b'{"format": 1, "key": 3, "inputs": [], "result": []}', b"\xff\xfe"],
)
def test_a_corrupt_entry_is_a_miss_and_is_rewritten(tmp_path, damage):
    untraced_files(tmp_path, 1)
    first = cli(".", cwd=tmp_path)
    (entry,) = (tmp_path / ".mpdoctor_cache").glob("*/*.json")
    entry.write_bytes(damage)
    again = cli(".", cwd=tmp_path)
    assert (again.returncode, again.stdout) == (first.returncode, first.stdout)
    assert note(again).startswith("mpdoctor: cache: 0 of 1 file from"), again.stderr
    assert json.loads(entry.read_text())["format"] == cache_module.FORMAT
    assert note(cli(".", cwd=tmp_path)).startswith("mpdoctor: cache: 1 of 1 file from")


@needs_tensorflow
def test_an_unwritable_cache_is_no_error(tmp_path):
    untraced_files(tmp_path, 1)
    (tmp_path / "blocked").write_text("a file where the cache directory should be")
    result = cli("--cache-dir", "blocked", ".", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "cannot write the cache" in note(result)


@needs_tensorflow
def test_two_runs_at_once_share_the_cache_safely(tmp_path):
    names = untraced_files(tmp_path, 40)
    env = {k: v for k, v in os.environ.items() if k != "MPDOCTOR_NO_CACHE"}
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, "-m", "mpdoctor", "check", "-v", "--format", "json", "."]
    runs = [
        subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in "ab"
    ]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in outputs]
    assert json.loads(outputs[0][0]) == json.loads(outputs[1][0])
    entries = list((tmp_path / ".mpdoctor_cache").glob("*/*"))
    assert len(entries) == len(names)  # one whole entry per file, no temporary file left
    assert all(json.loads(e.read_text())["format"] == cache_module.FORMAT for e in entries)
    # The same environment as the two runs: PYTHONPATH is part of the key (the trace child imports through it).
    again = cli(".", cwd=tmp_path, env={"PYTHONPATH": env["PYTHONPATH"]})
    assert note(again).startswith(f"mpdoctor: cache: {len(names)} of {len(names)} files")


# ------------------------------------------------------------------------------------- the cache itself


def _summary(status="ok", inputs=()) -> TraceSummary:
    return TraceSummary(path="m.py", status=status, inputs=None if inputs is None else list(inputs), lookups=Lookups())


DIAGNOSTIC = Diagnostic(
    "MP401",
    "output computes softmax in float16",
    Location("m.py", 3, 5, 3, 9, "dense", None),
    Severity.ERROR,
    passes=("static", "trace"),
    fix=Fix("set dtype", (Edit("m.py", 3, 9, 3, 9, ', dtype="float32"'),), "safe", None, True),
    notes=("confirmed",),
    cell_fix=Fix("cell", (Edit("m.py", 1, 1, 1, 1, "x"),), "unsafe", 2),
)


def _cache(tmp_path: Path) -> ResultCache:
    return ResultCache(tmp_path / "cache", Config(root=tmp_path), TraceOptions(enabled=True))


def test_every_field_of_a_result_round_trips(tmp_path):
    cache = _cache(tmp_path)
    error = FileError("m.py", "internal error? no: a syntax error", 2, 3, "syntax")
    cache.store("k" * 64, [DIAGNOSTIC], error, [_summary()], started=0.0, rederive=lambda: [DIAGNOSTIC])
    assert cache.load("k" * 64, "m.py", lambda: [DIAGNOSTIC]) == ([DIAGNOSTIC], error, [_summary()])


@pytest.mark.parametrize(
    "summary, error",
    [
        (_summary("failed"), None),  # a timeout or a killed child: not reproducible
        (_summary("internal"), None),  # mpdoctor could not trace here
        (_summary(inputs=None), None),  # what the run read is unknown
        (_summary(), FileError("m.py", "internal error in check: boom", kind="internal")),
    ],
)
def test_results_that_may_not_repeat_are_not_stored(tmp_path, summary, error):
    cache = _cache(tmp_path)
    cache.store("k" * 64, [DIAGNOSTIC], error, [summary], started=0.0)
    assert cache.load("k" * 64, "m.py") is None


def test_an_input_changed_or_written_during_the_run_is_a_miss(tmp_path):
    cache = _cache(tmp_path)
    module = tmp_path / "helper.py"
    module.write_text("A = 1\n")
    os.utime(module, (1, 1))
    cache.store("a" * 64, [], None, [_summary(inputs=[str(module)])], started=100.0)
    assert cache.load("a" * 64, "m.py") is not None
    module.write_text("A = 2\n")  # same size, new content and mtime
    assert cache.load("a" * 64, "m.py") is None
    cache.store("b" * 64, [], None, [_summary(inputs=[str(module)])], started=1.0)  # written after the run began
    assert cache.load("b" * 64, "m.py") is None


def test_fingerprints_of_checkpoints_directories_and_missing_paths(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.index").write_bytes(b"i")
    (tmp_path / "ckpt" / "model.data-00000-of-00001").write_bytes(b"d")
    (tmp_path / "ckpt" / "checkpoint").write_text('model_checkpoint_path: "model"\n')
    prefix = cache_module.fingerprint(str(tmp_path / "ckpt" / "model"))
    assert prefix[0] == "prefix" and [name for name, _ in prefix[1]] == [
        "checkpoint",
        "model.data-00000-of-00001",
        "model.index",
    ]
    assert cache_module.fingerprint(str(tmp_path / "ckpt"))[0] == "directory"
    assert cache_module.fingerprint(str(tmp_path / "nothing")) == ["missing"]
    (tmp_path / "ckpt" / "checkpoint").write_text('model_checkpoint_path: "model-2"\n')  # latest_checkpoint moved
    assert cache_module.fingerprint(str(tmp_path / "ckpt" / "model")) != prefix


def test_concurrent_writers_and_readers_see_whole_entries(tmp_path):
    cache = _cache(tmp_path)
    seen, failures = [], []

    def write():
        for _ in range(30):
            cache.store("c" * 64, [DIAGNOSTIC] * 20, None, [_summary()], started=0.0, rederive=lambda: [DIAGNOSTIC])

    def read():
        for _ in range(60):
            try:
                seen.append(cache.load("c" * 64, "m.py", lambda: [DIAGNOSTIC]))
            except Exception as exc:  # the contract: never
                failures.append(exc)

    threads = [threading.Thread(target=f) for f in (write, write, read, read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert all(result is None or result[0] == [DIAGNOSTIC] * 20 for result in seen)
    assert not [p for p in (tmp_path / "cache").rglob(".tmp-*")]


def test_the_key_ignores_run_settings_and_sees_per_file_ones(tmp_path, monkeypatch):
    def key(config: Config, trace: TraceOptions | None = None) -> str:
        cache = ResultCache(tmp_path, config, trace or TraceOptions(enabled=True))
        return cache.key("m.py", tmp_path / "m.py", "import keras\n", None, None)

    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    base = key(Config(root=tmp_path))
    assert key(Config(root=tmp_path, jobs=7)) == base
    assert key(Config(root=tmp_path), TraceOptions(enabled=True, jobs=3)) == base
    assert key(Config(root=tmp_path, assume_policy="mixed_float16")) != base
    assert key(Config(root=tmp_path, ignore={"MP401"})) != base
    assert key(Config(root=tmp_path), TraceOptions(enabled=True, entry="build")) != base
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    assert key(Config(root=tmp_path)) != base
