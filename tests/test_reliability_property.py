"""The command line under random use (issue 15): hypothesis drives `mpdoctor check` with random combinations of
flags, special files (FIFOs, sockets, devices, symlink loops, directories where files are expected) and malformed
configurations, and checks what must hold whatever the arguments:

- the exit code is 0, 1 or 2 (argparse's own usage errors included);
- no traceback and no internal error on stderr;
- nothing outside the example's folder changes, and no temporary file is left inside it.

Static pass only (--no-trace), so each example costs milliseconds: bounded by `MPDOCTOR_FUZZ_EXAMPLES` like
tests/test_fuzz.py (derandomised, no example database). Runs `main` in this process, on a fresh folder per
example; the FIFOs have no writer or reader, so anything that blocked on one would hang the test (none does).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpdoctor.cli import main

EXAMPLES = max(50, int(os.environ.get("MPDOCTOR_FUZZ_EXAMPLES", "1500")) // 10)
MODEL = (
    "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\n"
    "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation='softmax')])\n"
)
NOTEBOOK = (
    '{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": '
    '[{"cell_type": "code", "metadata": {}, "outputs": [], "source": "import keras\\nx = 1"}]}'
)

# What the folder of every example holds: name -> how to make it.
FILES = {
    "model.py": MODEL,
    "clean.py": "import keras\nx = keras.layers.Dense(3)\n",
    "broken.py": "def f(:\n",
    "nul.py": "import keras\nx = '\0'\n",
    "note.ipynb": NOTEBOOK,
    "bad.ipynb": '{"nbformat": 4, "metadata": {"kernelspec": "x"}, "cells": [5]}',
    "sub/inner.py": MODEL,
    "baseline.json": '{"version": 1, "findings": []}',
    "garbage.json": "[" * 5000,
    "sample.npz": "not a zip",
}
SPECIALS = ("fifo.py", "sock.py", "zero.py", "loop.py", "dir.py")
PATHS = [*FILES, *SPECIALS, "sub", ".", "missing.py", "/dev/null"]
OUTPUTS = ["out.txt", "model.py", "baseline.json", "fifo.py", "dir.py", "sub", "/dev/null", "new/dir/out.txt"]

CONFIG_KEYS = [
    "select",
    "extend-select",
    "ignore",
    "per-file-ignores",
    "exclude",
    "extend-exclude",
    "fail-on",
    "keras-version",
    "assume-policy",
    "entry",
    "trace-timeout",
    "baseline",
    "numerics",
    "numerics-threshold",
    "sample-batch-size",
    "sample-seed",
    "sample-range",
    "trace-memory",
    "unknown-key",
]
TOML_VALUES = [
    "nan", "inf", "-inf", "-1", "0", "1", "3", "1e999", "true", '"x"', '"MP4"', '"warning"', '["MP401"]', '["MP"]',
    "[1, 2]", '[0, "a"]', "[[1]]", "{}", '{"*.py" = ["MP401"]}', '{"*.py" = 5}', "1979-05-27", '"mixed_float16"',
    "[nan, 1]", "[0, inf]", "[1, 0]",
]  # fmt: skip
WHOLE_CONFIGS = [
    "tool = 5\n",
    "[tool]\nmpdoctor = 5\n",
    "[tool]\nmpdoctor = [1]\n",
    "[tool.mpdoctor\n",
    "\udcff\udcfe not utf-8",
    "a = " + "[" * 3000 + "]" * 3000 + "\n",
    "",
]


def config_text() -> st.SearchStrategy[str]:
    line = st.tuples(st.sampled_from(CONFIG_KEYS), st.sampled_from(TOML_VALUES)).map(lambda kv: f"{kv[0]} = {kv[1]}")
    table = st.lists(line, max_size=4, unique_by=lambda text: text.split(" = ")[0]).map(
        lambda lines: "[tool.mpdoctor]\n" + "\n".join(lines) + "\n"
    )
    return st.one_of(table, st.sampled_from(WHOLE_CONFIGS))


def flag_sets() -> st.SearchStrategy[list[str]]:
    """Random flags of `check` with values from the folder's files, special files and hostile numbers."""
    numbers = st.sampled_from(["nan", "inf", "-1", "0", "abc", "1e999", "2.5", "300"])
    codes = st.sampled_from(["MP401", "MP4", "ALL", "MP999", "", "mp1,MP2", "X", "MP401 MP402"])
    choices = [
        st.just(["--format"]).flatmap(
            lambda f: st.sampled_from(["text", "json", "sarif", "github", "junit", "gitlab", "html", "xml"]).map(
                lambda v: f + [v]
            )
        ),
        st.sampled_from(OUTPUTS).map(lambda v: ["-o", v]),
        st.sampled_from(OUTPUTS).map(lambda v: ["--html", v]),
        st.sampled_from(["baseline.json", "garbage.json", "fifo.py", "missing.json", "dir.py", "/dev/zero"]).map(
            lambda v: ["--baseline", v]
        ),
        st.sampled_from(OUTPUTS).map(lambda v: ["--write-baseline", v]),
        st.sampled_from(["cfg.toml", "fifo.py", "/dev/zero", "missing.toml", "dir.py", "sock.py"]).map(
            lambda v: ["--config", v]
        ),
        st.sampled_from(["sample.npz", "fifo.py", "missing.npz", "dir.py"]).map(lambda v: ["--sample", v]),
        numbers.map(lambda v: [f"--trace-timeout={v}"]),
        numbers.map(lambda v: [f"--trace-memory={v}"]),
        codes.map(lambda v: ["--select", v]),
        codes.map(lambda v: ["--extend-select", v]),
        codes.map(lambda v: ["--ignore", v]),
        st.sampled_from(["error", "warning", "info", "fatal"]).map(lambda v: ["--fail-on", v]),
        st.sampled_from(["2", "3", "4"]).map(lambda v: ["--keras-version", v]),
        st.sampled_from(["mixed_float16", "float16", "nonsense"]).map(lambda v: ["--assume-policy", v]),
        st.sampled_from(["build", "not a name", "model"]).map(lambda v: ["--entry", v]),
        st.sampled_from(["fifo.py", "missing", "model.py"]).map(lambda v: ["--checkpoint", v]),
        st.sampled_from(
            [["--exit-zero"], ["--statistics"], ["-q"], ["--fix"], ["--diff"], ["--unsafe-fixes"], ["--numerics"]]
        ),
        st.sampled_from([["--no-numerics"], ["--color", "always"], ["--color", "never"], ["--bogus"]]),
    ]
    return st.lists(st.one_of(choices), max_size=6).map(lambda parts: [arg for part in parts for arg in part])


def make_folder(root: Path) -> list[socket.socket]:
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
    os.mkfifo(root / "fifo.py")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(root / "sock.py"))
    (root / "zero.py").symlink_to("/dev/zero")
    (root / "loop.py").symlink_to("loop.py")
    (root / "dir.py").mkdir()
    return [server]


def state(root: Path) -> dict[str, tuple]:
    """Every entry under root: its type and, for regular files, content and mode."""
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        content = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
        found[str(path.relative_to(root))] = (stat.S_IFMT(info.st_mode), content, stat.S_IMODE(info.st_mode))
    return found


def run_in(folder: Path, argv: list[str]) -> tuple[int, str, str]:
    """`mpdoctor ARGV` run in this process from `folder`: its exit code (argparse's usage errors included), stdout
    and stderr."""
    out, err = io.StringIO(), io.StringIO()
    previous = os.getcwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code
    finally:
        os.chdir(previous)
    return code, out.getvalue(), err.getvalue()


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    paths=st.lists(st.sampled_from(PATHS), max_size=4),
    flags=flag_sets(),
    config=st.none() | config_text(),
    config_beside=st.booleans(),
)
def test_random_command_lines_exit_0_1_or_2_without_traceback_and_change_nothing_outside(
    paths, flags, config, config_beside
):
    base = Path(tempfile.mkdtemp(prefix="mpdoctor-property-"))
    try:
        folder, outside = base / "work", base / "outside"
        folder.mkdir()
        outside.mkdir()
        (outside / "pyproject.toml").write_text("[tool.mpdoctor]\nfail-on = 'error'\n")
        (outside / "model.py").write_text(MODEL)
        sockets = make_folder(folder)
        if config is not None:
            (folder / ("pyproject.toml" if config_beside else "cfg.toml")).write_bytes(
                config.encode("utf-8", "surrogateescape")
            )
        before_outside = state(outside)
        argv = ["check", "--no-trace", *flags, *paths]
        try:
            code, _, stderr = run_in(folder, argv)
        finally:
            for server in sockets:
                server.close()
        assert code in (0, 1, 2), (argv, code, stderr)
        assert "Traceback" not in stderr and "internal error" not in stderr, (argv, stderr)
        assert state(outside) == before_outside, argv
        leftovers = [p.name for p in folder.rglob("*") if "mpdoctor-tmp" in p.name or p.name.startswith(".")]
        assert leftovers == [], (argv, leftovers)
        for path in ("fifo.py", "zero.py", "loop.py"):  # special files are never replaced by a report
            assert not (folder / path).is_file() or (folder / path).is_symlink(), (argv, path)
    finally:
        shutil.rmtree(base, ignore_errors=True)
