"""Hostile input, second probe (issue 32), the command line and the Jupyter magic: reproductions 17, 19 and 20 of
../shared/repros/reliability-2/ as tests. Each ends as a clear one-line error (exit 2), a capped resource with a
note, or an honest summary: never an internal name, a process per file, or "All checks passed" for a file that was
not checked."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest

import mpdoctor.engine
from mpdoctor import static_workers
from mpdoctor.cli import main

MODEL = (
    "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\n"
    "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation='softmax')])\n"
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


@pytest.fixture
def planned_jobs(monkeypatch):
    """Two usable cores, and the `jobs` each plan of the static workers was asked for (no process is forked)."""
    asked: list[int] = []
    monkeypatch.setattr(mpdoctor.engine, "usable_cores", lambda: 2)

    def plan(jobs: int, sizes):
        asked.append(jobs)
        return 1, None

    monkeypatch.setattr(static_workers, "plan_workers", plan)
    return asked


def test_R19_jobs_are_capped_at_the_usable_cores_with_a_note(tmp_path, planned_jobs):
    for i in range(5):
        (tmp_path / f"m{i}.py").write_text(MODEL)
    code, out, err = run_main("check", "--no-trace", "-j", "100000", ".", cwd=tmp_path)
    assert code == 1 and "Found 5 problems" in out
    assert planned_jobs == [2]
    assert err.splitlines() == ["mpdoctor: note: -j 100000 is more than the 2 usable cores: using 2"]


def test_R19_jobs_within_the_cores_and_the_default_say_nothing(tmp_path, planned_jobs):
    (tmp_path / "m.py").write_text(MODEL)
    assert run_main("check", "--no-trace", "-j", "1", ".", cwd=tmp_path)[2] == ""
    assert run_main("check", "--no-trace", ".", cwd=tmp_path)[2] == ""
    assert planned_jobs == [1, 2]


def test_R19_a_configured_jobs_is_capped_quietly_unless_verbose(tmp_path, planned_jobs):
    (tmp_path / "pyproject.toml").write_text("[tool.mpdoctor]\njobs = 64\n")
    (tmp_path / "m.py").write_text(MODEL)
    assert run_main("check", "--no-trace", "m.py", cwd=tmp_path)[2] == ""
    err = run_main("check", "--no-trace", "-v", "m.py", cwd=tmp_path)[2]
    assert "mpdoctor: note: jobs 64 is more than the 2 usable cores: using 2" in err.splitlines()
    assert planned_jobs == [2, 2]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("check", "-j", "²"), "argument -j/--jobs: expected a positive integer, got '²'"),
        (("check", "-j", "٣"), "argument -j/--jobs: expected a positive integer, got '٣'"),
        (("check", "-j", "9" * 5000), "argument -j/--jobs: expected a positive integer, got '999"),
        (("check", "-j", "0"), "argument -j/--jobs: expected a positive integer, got '0'"),
        (("check", "--shard", "²/³"), "argument --shard: expected I/N with 1 <= I <= N, got '²/³'"),
        (("check", "--shard", "1/"), "argument --shard: expected I/N with 1 <= I <= N, got '1/'"),
        (("check", "--shard", "3/2"), "argument --shard: expected I/N with 1 <= I <= N, got '3/2'"),
        (("check", "--trace-timeout", "inf"), "argument --trace-timeout: expected a positive number of seconds"),
        (("check", "--trace-memory", "-5"), "argument --trace-memory: expected a positive number of MiB, got '-5'"),
        (("plan", "--rtol", "inf"), "argument --rtol: expected a finite positive number, got 'inf'"),
        (("plan", "--rtol", "nan"), "argument --rtol: expected a finite positive number, got 'nan'"),
        (("plan", "--rtol", "-0.1"), "argument --rtol: expected a finite positive number, got '-0.1'"),
        (("plan", "--rtol", "1e400"), "argument --rtol: expected a finite positive number, got '1e400'"),
        (("plan", "--rtol", "x"), "argument --rtol: expected a finite positive number, got 'x'"),
    ],
)
def test_R20_bad_numbers_are_one_line_errors_without_internal_names(tmp_path, arguments, message):
    (tmp_path / "m.py").write_text(MODEL)
    code, out, err = run_main(*arguments, "m.py", cwd=tmp_path)
    assert code == 2 and out == ""
    [line] = err.splitlines()
    assert line.startswith(f"mpdoctor: error: {message}"), line
    assert "_positive" not in line and "_shard" not in line and "invalid" not in line


def test_R20_good_numbers_still_parse(tmp_path):
    (tmp_path / "m.py").write_text(MODEL)
    code, out, _err = run_main(
        "check", "--no-trace", "-j", "1", "--shard", "1/1", "--trace-timeout", "2.5", ".", cwd=tmp_path
    )
    assert code == 1 and "Found 1 problem" in out


@pytest.mark.parametrize(
    ("name", "content", "first_line"),
    [
        ("broken.py", "def f(:\n", "broken.py:1:7: syntax error: invalid syntax"),
        ("empty", None, "No Python files found (0 files checked)."),
    ],
)
def test_R17_the_magic_never_shows_an_unchecked_path_as_a_passed_live_model(tmp_path, name, content, first_line):
    pytest.importorskip("IPython")
    from mpdoctor.jupyter import check_path

    target = tmp_path / name
    if content is None:
        target.mkdir()
    else:
        target.write_text(content)
    result = check_path(target, trace=False)
    text = repr(result)
    assert "All checks passed" not in text and "live model" not in text
    assert text.splitlines()[0] == first_line.replace("broken.py", str(target))
