"""The CI gate: --write-baseline / --baseline (matched by code, path and line content; robust to line shifts, not
to edits of the offending line), the `baseline` config key, bad baseline files, and the stderr progress line."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys

import pytest
from test_cli import CLEAN, SOFTMAX_HEAD, mpdoctor


@pytest.fixture
def project(tmp_path):
    (tmp_path / "model.py").write_text(SOFTMAX_HEAD)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


def write_baseline(project, *paths):
    result = mpdoctor("check", "--no-trace", "--write-baseline", "baseline.json", *paths, cwd=project)
    assert result.returncode == 0, result.stderr
    return json.loads((project / "baseline.json").read_text())


def gate(project, *args):
    return mpdoctor("check", "--no-trace", "--baseline", "baseline.json", *args, cwd=project)


def test_write_then_gate_passes_and_counts_the_baselined_finding(project):
    data = write_baseline(project)
    assert [(f["code"], f["path"], f["line"]) for f in data["findings"]] == [("MP401", "model.py", 7)]
    result = gate(project)
    assert result.returncode == 0, result.stdout
    assert "All checks passed (2 files checked; 1 baselined)." in result.stdout
    summary = json.loads(gate(project, "--format", "json").stdout)["summary"]
    assert summary["baselined"] == 1 and summary["total"] == 0


def test_lines_inserted_above_keep_the_match(project):
    write_baseline(project)
    (project / "model.py").write_text("# header\n\n\nimport os\n" + SOFTMAX_HEAD)
    result = gate(project)
    assert result.returncode == 0, result.stdout


def test_changing_the_offending_line_makes_it_new(project):
    write_baseline(project)
    (project / "model.py").write_text(SOFTMAX_HEAD.replace("Dense(10,", "Dense(12,"))
    result = gate(project)
    assert result.returncode == 1
    assert result.stdout.startswith("model.py:7:5: MP401")


def test_a_new_finding_elsewhere_fails_while_the_old_one_stays_quiet(project):
    write_baseline(project)
    (project / "other.py").write_text(SOFTMAX_HEAD)
    result = gate(project)
    assert result.returncode == 1
    assert [line.split(":")[0] for line in result.stdout.splitlines()[:-1]] == ["other.py"]
    assert "1 more in the baseline" in result.stdout


def _models(count: int) -> str:
    head = 'import keras\n\nkeras.mixed_precision.set_global_policy("mixed_float16")\n'
    model = (
        "model{i} = keras.Sequential([\n    keras.Input((32,)),\n"
        '    keras.layers.Dense(10, activation="softmax"),\n])\n'
    )
    return head + "".join(model.format(i=i) for i in range(count))


def test_a_third_identical_line_is_one_new_finding(project):
    (project / "model.py").write_text(_models(2))
    assert len(write_baseline(project, "model.py")["findings"]) == 2
    (project / "model.py").write_text(_models(3))
    result = gate(project, "model.py")
    assert result.returncode == 1
    assert "Found 1 problem (1 error)" in result.stdout and "2 more in the baseline" in result.stdout


def test_baseline_paths_do_not_depend_on_the_working_directory(project):
    (project / "pkg").mkdir()
    (project / "pkg" / "model.py").write_text(SOFTMAX_HEAD)
    (project / "model.py").unlink()
    write_baseline(project, "pkg")
    result = mpdoctor("check", "--no-trace", "--baseline", "../baseline.json", ".", cwd=project / "pkg")
    assert result.returncode == 0, result.stdout


def test_config_key(project):
    write_baseline(project)
    (project / "pyproject.toml").write_text('[tool.mpdoctor]\nbaseline = "baseline.json"\n')
    assert mpdoctor("check", "--no-trace", cwd=project).returncode == 0
    (project / "pyproject.toml").write_text('[tool.mpdoctor]\nbaseline = "missing.json"\n')
    result = mpdoctor("check", "--no-trace", cwd=project)
    assert result.returncode == 2 and "missing.json: no such baseline file" in result.stderr


@pytest.mark.parametrize(
    "content,needle",
    [
        (None, "no such baseline file"),
        ("{oops", "not a mpdoctor baseline: invalid JSON"),
        ('{"version": 1, "findings": {}}', "not a mpdoctor baseline"),
        ('{"version": 1, "findings": [{"code": "MP401"}]}', "lacks code, path or fingerprint"),
    ],
)
def test_bad_baseline_is_one_line_exit_2(project, content, needle):
    if content is not None:
        (project / "baseline.json").write_text(content)
    result = gate(project)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("mpdoctor: error: baseline.json: ")
    assert needle in result.stderr


def test_write_and_read_together_is_a_usage_error(project):
    result = mpdoctor("check", "--no-trace", "--baseline", "a.json", "--write-baseline", "b.json", cwd=project)
    assert result.returncode == 2 and "not allowed with argument" in result.stderr


def test_fail_on_still_applies_to_new_findings(project):
    write_baseline(project)
    (project / "other.py").write_text(SOFTMAX_HEAD)
    assert gate(project, "--fail-on", "error").returncode == 1
    assert gate(project, "--select", "MP002").returncode == 0


# --- progress on stderr --------------------------------------------------------------------------------------------


def run_with_tty_stderr(args, cwd) -> tuple[int, str]:
    """Run mpdoctor with stderr on a pseudo-terminal (stdout piped) and return what the terminal received."""
    controller, terminal = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    process = subprocess.Popen(
        [sys.executable, "-m", "mpdoctor", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=terminal, env=env
    )
    os.close(terminal)
    received = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO once the child closed its side
            break
        if not chunk:
            break
        received += chunk
    process.communicate(timeout=120)
    os.close(controller)
    return process.returncode, received.decode()


def test_progress_on_a_terminal_for_several_files(project):
    code, terminal = run_with_tty_stderr(["check", "--no-trace", "clean.py", "model.py"], project)
    assert code == 1
    assert "[1/2] clean.py" in terminal and "[2/2] model.py" in terminal
    assert terminal.endswith("\r\x1b[K")  # the line is cleared before the report


def test_no_progress_for_one_file_or_when_stderr_is_not_a_terminal(project):
    code, terminal = run_with_tty_stderr(["check", "--no-trace", "model.py"], project)
    assert code == 1 and terminal == ""
    result = mpdoctor("check", "--no-trace", "clean.py", "model.py", cwd=project)
    assert result.stderr == ""


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_for_a_single_file_only_when_the_trace_runs():
    from mpdoctor.progress import Progress

    terminal = FakeTerminal()
    progress = Progress.for_stream(terminal, tracing=True)
    progress(1, 1, "model.py")
    progress.clear()
    assert terminal.getvalue() == "\r\x1b[K[1/1] model.py (trace)\r\x1b[K"
    terminal = FakeTerminal()
    progress = Progress.for_stream(terminal, tracing=False)
    progress(1, 1, "model.py")
    progress.clear()
    assert terminal.getvalue() == ""
    assert Progress.for_stream(io.StringIO(), tracing=True) is None
