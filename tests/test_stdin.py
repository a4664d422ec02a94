"""`mpdoctor check -` and `--stdin-filename PATH` (issue 33): the source on stdin checked as ruff and black check it
for editors: reported under PATH (else `-`), configured from PATH, traced only when PATH holds the same text; with
--fix, the fixed source on stdout and the report on stderr."""

from __future__ import annotations

import codecs
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL = (
    "import keras\n"
    "keras.mixed_precision.set_global_policy('mixed_float16')\n"
    "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation='softmax')])\n"
)
FIXED = MODEL.replace("activation='softmax')", "activation='softmax', dtype=\"float32\")")


def check(*args: str, stdin: bytes | str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """`mpdoctor check ARGS` with `stdin` on its standard input (bytes out, to compare what --fix writes exactly)."""
    return subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", *args],
        input=stdin.encode() if isinstance(stdin, str) else stdin,
        capture_output=True,
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3"),
        timeout=timeout,
        check=False,
    )


def test_dash_checks_the_source_on_stdin_as_dash(tmp_path):
    (tmp_path / "-").write_text("x = 1\n")  # a file named `-` is not what `-` means
    result = check("--no-trace", "-", stdin=MODEL, cwd=tmp_path)
    lines = result.stdout.decode().splitlines()
    assert result.returncode == 1 and result.stderr == b""
    assert lines[0].startswith("-:3:46: MP401 [*] model output Dense")
    assert lines[-1] == "Found 1 problem (1 error) in 1 file. 1 fixable with --fix ([*])."


def test_stdin_filename_names_the_source_and_finds_its_configuration(tmp_path):
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.mpdoctor]\nignore = ["MP401"]\n')
    (tmp_path / "elsewhere").mkdir()
    # A buffer not saved yet (no such file): named, and configured from the pyproject above it.
    result = check("--no-trace", "-", "--stdin-filename", "src/new.py", stdin=MODEL, cwd=tmp_path / "elsewhere")
    assert result.returncode == 1 and result.stdout.decode().startswith("src/new.py:3:46: MP401")
    ignored = check("--no-trace", "--stdin-filename", "src/new.py", stdin=MODEL, cwd=project)  # no `-`: as ruff
    assert ignored.returncode == 0 and ignored.stdout.decode() == "All checks passed (1 file checked).\n"


def test_a_source_that_does_not_parse_is_a_one_line_error(tmp_path):
    result = check("--no-trace", "-", "--stdin-filename", "m.py", stdin="import keras\ndef f(:\n", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.decode() == "m.py:2:7: syntax error: invalid syntax\n"
    assert "1 file could not be checked" in result.stdout.decode()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-", "m.py"), "`-` (stdin) is checked alone: give no other path with it"),
        (("--stdin-filename", "x.py", "m.py"), "--stdin-filename names the source read from stdin"),
        (("--show-target", "-"), "--show-target reads files: not with `-` (stdin)"),
        (("--stdin-filename", "demo.ipynb"), "demo.ipynb: notebooks are not read from stdin"),
        (("--trace", "-"), "--trace of stdin needs --stdin-filename naming a file that holds the same text"),
        (("-o", "m.py", "--stdin-filename", "m.py"), "m.py: is one of the files being checked; not overwritten (-o)"),
    ],
)
def test_what_cannot_work_with_stdin_is_a_usage_error(tmp_path, args, message):
    (tmp_path / "m.py").write_text(MODEL)
    result = check(*args, stdin=MODEL, cwd=tmp_path)
    if "--trace" in args and "TensorFlow" in result.stderr.decode():
        pytest.skip("needs TensorFlow installed to get past --trace's own check")
    assert result.returncode == 2 and result.stdout == b""
    assert result.stderr.decode().splitlines() == [f"mpdoctor: error: {message}"] or result.stderr.decode().startswith(
        f"mpdoctor: error: {message}"
    )
    assert (tmp_path / "m.py").read_text() == MODEL


def test_fix_writes_the_fixed_source_to_stdout_and_the_report_to_stderr(tmp_path):
    (tmp_path / "m.py").write_text(MODEL)
    result = check("--no-trace", "--fix", "-", "--stdin-filename", "m.py", stdin=MODEL, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.decode() == FIXED
    assert result.stderr.decode().splitlines() == [
        "Fixed 1 problem in m.py (unverified (no trace pass)).",
        "1 problem fixed, 0 remaining.",
        "All checks passed (1 file checked).",
    ]
    assert (tmp_path / "m.py").read_text() == MODEL  # the file is the editor's business


def test_fix_keeps_the_bytes_of_the_source(tmp_path):
    crlf = codecs.BOM_UTF8 + MODEL.replace("\n", "\r\n").encode()
    result = check("--no-trace", "--fix", "-", stdin=crlf, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == codecs.BOM_UTF8 + FIXED.replace("\n", "\r\n").encode()
    clean = "x = 1\r\ny = 'é'\n".encode()  # nothing to fix: the very bytes read (mixed line endings included)
    unchanged = check("--no-trace", "--fix", "-", stdin=clean, cwd=tmp_path)
    assert unchanged.returncode == 0 and unchanged.stdout == clean


def test_diff_shows_the_fix_of_stdin(tmp_path):
    result = check("--no-trace", "--diff", "-", "--stdin-filename", "m.py", stdin=MODEL, cwd=tmp_path)
    diff = result.stdout.decode()
    assert result.returncode == 1 and diff.startswith("--- a/m.py\n+++ b/m.py\n")
    assert f"+{FIXED.splitlines()[2]}" in diff and result.stderr.decode() == "Would fix 1 problem.\n"


@pytest.mark.usefixtures("tensorflow")
def test_the_trace_runs_only_when_the_file_holds_the_text(tmp_path):
    (tmp_path / "m.py").write_text(MODEL)
    same = check("--format", "json", "--stdin-filename", "m.py", stdin=MODEL, cwd=tmp_path)
    report = json.loads(same.stdout)
    assert report["summary"]["passes"] == ["static", "trace"]
    assert [d["passes"] for d in report["diagnostics"]] == [["static", "trace"]]
    # An edited buffer: the file on disk is not what was sent, so only the static pass speaks for it.
    edited = MODEL + "print('unsaved edit')\n"
    other = json.loads(check("--format", "json", "--stdin-filename", "m.py", stdin=edited, cwd=tmp_path).stdout)
    assert other["summary"]["passes"] == ["static"] and [d["code"] for d in other["diagnostics"]] == ["MP401"]
    missing = json.loads(check("--format", "json", "--stdin-filename", "new.py", stdin=MODEL, cwd=tmp_path).stdout)
    assert missing["summary"]["passes"] == ["static"]


@pytest.mark.usefixtures("tensorflow")
def test_fix_of_stdin_held_by_its_file_is_verified_by_the_trace_and_writes_nothing(tmp_path):
    (tmp_path / "m.py").write_text(MODEL)
    result = check("--fix", "-", "--stdin-filename", "m.py", stdin=MODEL, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.decode() == FIXED, result.stderr
    assert "Fixed 1 problem in m.py (verified)." in result.stderr.decode().splitlines()
    assert (tmp_path / "m.py").read_text() == MODEL
