"""The GitHub Action (action.yml, a composite action): its steps' shell commands run here as the runner would run
them, with the `${{ ... }}` values of their `env:` filled in for a push, a pull request and a fork's pull request.
The install step builds a fresh virtualenv (pip, no TensorFlow): slow."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import yaml
from test_cli import CLEAN, SOFTMAX_HEAD

ROOT = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
EXPRESSION = re.compile(r"^\$\{\{\s*([\w.-]+)\s*\}\}$")


def step(name: str) -> dict:
    [found] = [s for s in ACTION["runs"]["steps"] if s.get("name") == name]
    return found


def run_step(
    name: str, context: dict, cwd: Path, path_dirs: tuple[str, ...] = ()
) -> tuple[subprocess.CompletedProcess, dict]:
    """Run one `run:` step with bash, its `env:` evaluated in `context` (inputs with their defaults, github.*,
    steps.*); returns the process and what it wrote to $GITHUB_OUTPUT."""
    spec = step(name)
    assert "${{" not in spec["run"], "inputs reach scripts through env: only"
    inputs = {key: value.get("default", "") for key, value in ACTION["inputs"].items()} | context.get("inputs", {})
    values = {f"inputs.{k}": v for k, v in inputs.items()} | {k: v for k, v in context.items() if k != "inputs"}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NO_COLOR", "FORCE_COLOR")}
    for key, expression in spec.get("env", {}).items():
        match = EXPRESSION.match(str(expression))
        assert match, f"{name}: {key} is not a plain ${{{{ value }}}}"
        env[key] = str(values.get(match.group(1), ""))
    output = cwd / "github_output"
    output.write_text("")
    env.update(GITHUB_OUTPUT=str(output), PATH=os.pathsep.join([*path_dirs, env["PATH"]]))
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", spec["run"]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return result, outputs


def test_a_composite_action_with_the_documented_inputs():
    assert ACTION["runs"]["using"] == "composite"
    assert set(ACTION["inputs"]) == {"paths", "args", "tensorflow", "trace", "sarif", "sarif-file", "python-version"}
    assert ACTION["runs"]["steps"][0]["uses"].startswith("actions/setup-python@")
    upload = step("Upload SARIF")
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@") and "always()" in upload["if"]
    readme = (ROOT / "README.md").read_text()
    from mpdoctor import __version__

    assert f"uses: mpdoctor/mpdoctor@v{__version__}" in readme
    # The README says plainly that the trace runs the checked file, and how to check untrusted code.
    assert "**The trace pass imports and runs the checked file**" in readme and "with `--no-trace`" in readme


FORK_PR = {"github.event_name": "pull_request", "github.event.pull_request.head.repo.full_name": "someone/fork"}
OWN_PR = {"github.event_name": "pull_request", "github.event.pull_request.head.repo.full_name": "org/project"}
PUSH = {"github.event_name": "push"}


@pytest.mark.parametrize(
    "event,inputs,flag",
    [
        (PUSH, {}, ""),
        (OWN_PR, {}, ""),
        (FORK_PR, {}, "--no-trace"),  # untrusted code is never run by default
        ({**FORK_PR, "github.event_name": "pull_request_target"}, {}, "--no-trace"),
        (PUSH, {"tensorflow": "false"}, "--no-trace"),
        (FORK_PR, {"trace": "true"}, "--trace"),  # an explicit choice is honoured
        (PUSH, {"trace": "false"}, "--no-trace"),
    ],
)
def test_the_trace_is_off_for_pull_requests_from_forks(tmp_path, event, inputs, flag):
    result, outputs = run_step(
        "Choose the passes", {**event, "github.repository": "org/project", "inputs": inputs}, tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert outputs == {"flag": flag}
    from_fork = event.get("github.event.pull_request.head.repo.full_name") == "someone/fork"
    assert ("static pass only" in result.stdout) is (from_fork and not inputs)  # said when the default decided


def test_a_bad_trace_input_is_one_line_exit_2(tmp_path):
    result, _ = run_step("Choose the passes", {**PUSH, "inputs": {"trace": "yes"}}, tmp_path)
    assert (
        result.returncode == 2
        and result.stderr.strip() == "mpdoctor action: trace must be auto, true or false, not 'yes'"
    )


@pytest.fixture
def mpdoctor_on_path(tmp_path) -> str:
    """An `mpdoctor` command running this checkout (what the install step puts on PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    command = bin_dir / "mpdoctor"
    command.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m mpdoctor "$@"\n')
    command.chmod(0o755)
    return str(bin_dir)


def test_the_check_step_fails_on_findings_and_writes_sarif_for_upload(tmp_path, mpdoctor_on_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "model.py").write_text(SOFTMAX_HEAD)
    (project / "clean.py").write_text(CLEAN)
    context = {"steps.passes.outputs.flag": "--no-trace", "inputs": {"sarif": "true", "args": "--fail-on error"}}
    result, _ = run_step("mpdoctor check", context, project, (mpdoctor_on_path,))
    assert result.returncode == 1, result.stderr
    sarif = json.loads((project / "mpdoctor.sarif").read_text())
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["MP401"]
    # Without SARIF the findings are printed; a clean path passes; `paths` splits on spaces and never globs.
    context = {"steps.passes.outputs.flag": "--no-trace", "inputs": {"paths": "model.py clean.py"}}
    result, _ = run_step("mpdoctor check", context, project, (mpdoctor_on_path,))
    assert result.returncode == 1 and "model.py:7:5: MP401" in result.stdout
    context = {"steps.passes.outputs.flag": "--no-trace", "inputs": {"paths": "clean.py"}}
    result, _ = run_step("mpdoctor check", context, project, (mpdoctor_on_path,))
    assert result.returncode == 0 and result.stdout == "All checks passed (1 file checked).\n"
    context = {"steps.passes.outputs.flag": "--no-trace", "inputs": {"paths": "*.py"}}
    result, _ = run_step("mpdoctor check", context, project, (mpdoctor_on_path,))
    assert result.returncode == 2 and "*.py: no such file or directory" in result.stderr


@pytest.mark.slow
def test_the_install_step_installs_this_mpdoctor_without_tensorflow(tmp_path):
    environment = tmp_path / "venv"
    venv.create(environment, with_pip=True)
    bin_dir = str(environment / "bin")
    result, _ = run_step(
        "Install mpdoctor", {"github.action_path": str(ROOT), "inputs": {"tensorflow": "false"}}, tmp_path, (bin_dir,)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    version = subprocess.run([f"{bin_dir}/mpdoctor", "--version"], capture_output=True, text=True, cwd=tmp_path)
    from mpdoctor import __version__

    assert version.stdout.splitlines()[:2] == [f"mpdoctor {__version__}", "tensorflow not installed"]
