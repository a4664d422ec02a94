"""The GitHub Action (action.yml, a composite action): its steps' shell commands run here as the runner would run
them, with the `${{ ... }}` values of their `env:` filled in for a push, a pull request and a fork's pull request.
The install step builds a fresh virtualenv (pip, no TensorFlow): slow."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
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
    assert set(ACTION["inputs"]) == {
        "paths",
        "args",
        "tensorflow",
        "trace",
        "install",
        "baseline",
        "sarif",
        "sarif-file",
        "python-version",
    }
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
# Events that run the repository's own code: the trace is on by default.
TRUSTED = ["push", "schedule", "workflow_dispatch", "release"]
# Events that can carry a fork's code (issue 32, 04): a review of a fork's pull request checks out its merge commit,
# workflow_run and issue_comment workflows commonly check out the fork's head; pull_request_target runs with the
# base repository's secrets; and any event this list does not know is untrusted too (an allow-list).
UNTRUSTED = [
    "pull_request_target",
    "pull_request_review",
    "pull_request_review_comment",
    "workflow_run",
    "issue_comment",
    "merge_group",
    "repository_dispatch",
    "discussion_comment",
    "some_future_event",
]


@pytest.mark.parametrize(
    "event,inputs,flag",
    [
        (PUSH, {}, ""),
        (OWN_PR, {}, ""),
        (FORK_PR, {}, "--no-trace"),  # untrusted code is never run by default
        ({**FORK_PR, "github.event_name": "pull_request_target"}, {}, "--no-trace"),
        ({**OWN_PR, "github.event_name": "pull_request_target"}, {}, "--no-trace"),
        ({"github.event_name": "pull_request"}, {}, "--no-trace"),  # no head repository: not known to be ours
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
    said = "static pass only" in result.stdout
    assert said is (flag == "--no-trace" and not inputs)  # said when the event decided


@pytest.mark.parametrize("event", TRUSTED + UNTRUSTED)
def test_the_trace_runs_only_for_events_on_the_allow_list(tmp_path, event):
    # A fork's pull request in the payload, as a review or workflow_run of it would carry.
    context = {**FORK_PR, "github.event_name": event, "github.repository": "org/project"}
    result, outputs = run_step("Choose the passes", context, tmp_path)
    assert result.returncode == 0, result.stderr
    assert outputs == {"flag": "" if event in TRUSTED else "--no-trace"}
    assert ("static pass only" in result.stdout) is (event in UNTRUSTED)
    if event in UNTRUSTED:
        assert f"{event} event: static pass only" in result.stdout


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
    # The job log says what the SARIF holds (issue 33): nothing else is printed with -o.
    assert result.stdout == "" and result.stderr == "mpdoctor: wrote mpdoctor.sarif: 1 problem in 2 files\n"
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


def test_the_baseline_input_is_used_once_the_file_exists(tmp_path, mpdoctor_on_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "model.py").write_text(SOFTMAX_HEAD)
    context = {"steps.passes.outputs.flag": "--no-trace", "inputs": {"baseline": "mpdoctor-baseline.json"}}
    # Before a baseline is committed: a note, and every finding counts (not exit 2 for a missing file).
    result, _ = run_step("mpdoctor check", context, project, (mpdoctor_on_path,))
    assert result.returncode == 1 and "model.py:7:5: MP401" in result.stdout
    assert "no baseline file mpdoctor-baseline.json yet: every finding counts" in result.stdout
    written = subprocess.run(
        ["mpdoctor", "check", "--no-trace", "--write-baseline", "mpdoctor-baseline.json", "model.py"],
        cwd=project,
        env=dict(os.environ, PATH=os.pathsep.join([mpdoctor_on_path, os.environ["PATH"]])),
        capture_output=True,
        text=True,
    )
    assert written.returncode == 0, written.stderr
    result, _ = run_step("mpdoctor check", context, project, (mpdoctor_on_path,))
    assert result.returncode == 0 and "1 baselined" in result.stdout, result.stdout + result.stderr


def test_paths_are_passed_after_a_double_dash(tmp_path, mpdoctor_on_path):
    """A path named like an option is a file (issue 32, 03): `-osetup.py` never becomes `-o setup.py`."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "-osetup.py").write_text(SOFTMAX_HEAD)
    (project / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    context = {"steps.passes.outputs.flag": "--no-trace", "inputs": {"paths": "-osetup.py"}}
    result, _ = run_step("mpdoctor check", context, project, (mpdoctor_on_path,))
    assert result.returncode == 1 and "-osetup.py:7:5: MP401" in result.stdout, result.stdout + result.stderr
    assert (project / "setup.py").read_text() == "from setuptools import setup\nsetup()\n"


def test_the_project_requirements_are_installed_only_when_the_trace_runs(tmp_path):
    # A fake pip records what it was asked to install (no network, nothing installed).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\necho "$@" >> "{tmp_path}/pip-calls"\n')
    python.chmod(0o755)
    calls = tmp_path / "pip-calls"
    for flag, install, expected in [
        ("", "-r requirements.txt", "-m pip install --quiet --disable-pip-version-check -r requirements.txt\n"),
        ("--trace", "-r req*.txt", "-m pip install --quiet --disable-pip-version-check -r req*.txt\n"),  # no glob
        ("--no-trace", "-r requirements.txt", None),  # static pass: imports nothing, a fork's code never installed
        ("", "", None),
    ]:
        calls.unlink(missing_ok=True)
        (tmp_path / "requirements.txt").write_text("")
        context = {"steps.passes.outputs.flag": flag, "inputs": {"install": install}}
        result, _ = run_step("Install the project's requirements", context, tmp_path, (str(bin_dir),))
        assert result.returncode == 0, result.stderr
        assert (calls.read_text() if calls.exists() else None) == expected
        assert ("requirements are not installed" in result.stdout) is (flag == "--no-trace")


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


def ci_check_lines() -> list[str]:
    """The `mpdoctor check` commands of the CI snippets in the README and docs/integrations.md, as printed."""
    found = []
    for doc in (ROOT / "README.md", ROOT / "docs" / "integrations.md"):
        for line in doc.read_text().splitlines():
            command = re.match(r"\s*- (?:run: )?(mpdoctor check .*)$", line)
            if command and "--shard" not in command.group(1):
                found.append(command.group(1))
    return found


def test_the_ci_snippets_pass_the_baseline_only_once_it_exists(tmp_path, mpdoctor_on_path):
    """Issue 33: with `--baseline mpdoctor-baseline.json` the snippets exited 2 in a repository without one, and with
    `-o` printed nothing. As printed (GitHub's bash, GitLab's sh): every finding counts before the baseline is
    committed, only new ones after; the file written is named on stderr."""
    lines = ci_check_lines()
    # GitHub Actions in the README and the docs, GitLab CI in the docs.
    assert len(lines) == 3 and all("--baseline" in line for line in lines), lines
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([mpdoctor_on_path, env["PATH"]])
    for number, line in enumerate(lines):
        project = tmp_path / f"project{number}"
        project.mkdir()
        (project / "model.py").write_text(SOFTMAX_HEAD)
        written = re.search(r"-o (\S+)", line).group(1)
        shell = "sh" if "gitlab" in line else "bash"
        before = subprocess.run([shell, "-ec", line], cwd=project, env=env, capture_output=True, text=True)
        assert before.returncode == 1, line + "\n" + before.stderr
        assert before.stderr == f"mpdoctor: wrote {written}: 1 problem in 1 file\n"
        baseline = ["mpdoctor", "check", "--no-trace", "--write-baseline", "mpdoctor-baseline.json", "."]
        subprocess.run(baseline, cwd=project, env=env, check=True, capture_output=True)
        after = subprocess.run([shell, "-ec", line], cwd=project, env=env, capture_output=True, text=True)
        assert after.returncode == 0, line + "\n" + after.stderr
        assert after.stderr == f"mpdoctor: wrote {written}: no problems in 1 file\n"


REAL_REPO = ROOT / "tests" / "data" / "real_repos" / "sayakpaul__ConvNeXt-TF"


@pytest.mark.slow
def test_the_ci_snippet_and_the_action_pass_on_a_repository_whose_other_dependencies_are_missing(
    tmp_path, mpdoctor_on_path, tensorflow
):
    """Issue 31: the README's CI command, as printed, and the action's check step (a push: the trace runs) on a real
    repository (tests/data/real_repos) in an environment holding only mpdoctor and TensorFlow: torch, timm and
    ml_collections are not installed. The environment is not the code's fault: exit 0, an MP003 info for the file
    the trace could not import (convert.py, naming torch), and the model the rest of the project builds is traced."""
    for module in ("torch", "timm", "ml_collections"):
        if importlib.util.find_spec(module) is not None:
            pytest.skip(f"{module} is installed here")
    project = tmp_path / "ConvNeXt-TF"
    shutil.copytree(REAL_REPO, project)
    (project / ".git").mkdir()
    github = ci_check_lines()[0]  # the README's GitHub Actions job
    assert "-o mpdoctor.sarif" in github
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([mpdoctor_on_path, env["PATH"]])
    printed = subprocess.run(["bash", "-ec", github], cwd=project, env=env, capture_output=True, text=True, timeout=900)
    assert printed.returncode == 0, printed.stdout + printed.stderr
    [result] = json.loads((project / "mpdoctor.sarif").read_text())["runs"][0]["results"]
    assert result["ruleId"] == "MP003" and result["level"] == "note", result
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "convert.py"
    assert "not traced: `torch` is not installed here" in result["message"]["text"]
    assert printed.stderr.endswith("mpdoctor: wrote mpdoctor.sarif: 1 problem in 4 files\n"), printed.stderr
    # The model of models/convnext_tf.py was traced: the JSON report holds it.
    traced = subprocess.run(
        ["mpdoctor", "check", "--format", "json", "."],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    models = {t["path"]: [m["how"] for m in t["models"]] for t in json.loads(traced.stdout)["traces"]}
    assert models["models/convnext_tf.py"] == ["get_convnext_model()"], models
    context = {**PUSH, "github.repository": "org/project", "steps.passes.outputs.flag": "", "inputs": {"sarif": "true"}}
    checked, _ = run_step("mpdoctor check", context, project, (mpdoctor_on_path,))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stderr.endswith("mpdoctor: wrote mpdoctor.sarif: 1 problem in 4 files\n"), checked.stderr
