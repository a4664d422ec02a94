"""The second hostile probe (issue 32), the reproductions about what the project ships around the command: 03 (the
pre-commit hooks' file names read as options) and 04 (the Action's trace on events that carry a fork's code). Each
is ../shared/repros/reliability-2/0N_*.sh as a test; the real `pre-commit run` of 03 is in tests/test_precommit.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_github_action import run_step
from test_reliability import MODEL, run_cli, run_main

ROOT = Path(__file__).resolve().parent.parent
SETUP = 'from setuptools import setup\nsetup(name="precious")\n'


@pytest.fixture
def staged(tmp_path: Path) -> Path:
    """A project whose staged files are m.py and a model named `-osetup.py`, beside a setup.py to protect."""
    (tmp_path / "m.py").write_text(MODEL)
    (tmp_path / "-osetup.py").write_text(MODEL)
    (tmp_path / "setup.py").write_text(SETUP)
    return tmp_path


def test_R03_a_file_named_like_an_option_is_refused_not_read_as_one(staged):
    # What pre-commit ran before the hooks ended their args with `--`: refused, nothing written.
    code, out, err = run_main("check", "--no-trace", "m.py", "-osetup.py", cwd=staged)
    assert code == 2 and out == ""
    assert err == (
        "mpdoctor: error: -osetup.py: a file of that name exists, and it reads as an option; put file names after"
        " -- (mpdoctor check -- FILE ...)\n"
    )
    assert (staged / "setup.py").read_text() == SETUP


def test_R03_after_a_double_dash_it_is_checked_as_a_file(staged):
    # What the hooks run now (entry, args ["--"], the file names).
    result = run_cli("check", "--no-trace", "--", "m.py", "-osetup.py", cwd=staged)
    assert result.returncode == 1, result.stderr
    assert "-osetup.py:3:" in result.stdout and "m.py:3:" in result.stdout
    assert (staged / "setup.py").read_text() == SETUP


def test_R03_an_option_with_no_such_file_still_parses(staged):
    # The guard looks at existing files only: `-o report.txt` and `-oreport.txt` keep working.
    code, _, err = run_main("check", "--no-trace", "-oreport.txt", "m.py", cwd=staged)
    assert code == 1 and err.startswith("mpdoctor: wrote report.txt: 1 problem in 1 file")
    assert "MP401" in (staged / "report.txt").read_text()


def test_R03_both_hooks_end_their_args_with_a_double_dash():
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert [hook["args"] for hook in hooks] == [["--"], ["--"]]


@pytest.mark.parametrize(
    "event,head",
    [
        ("pull_request", "fork/repo"),
        ("pull_request_review", "fork/repo"),
        ("pull_request_review_comment", "fork/repo"),
        ("workflow_run", ""),
        ("issue_comment", ""),
    ],
)
def test_R04_trace_auto_is_static_only_for_every_event_that_can_carry_a_fork(tmp_path, event, head):
    context = {
        "github.event_name": event,
        "github.event.pull_request.head.repo.full_name": head,
        "github.repository": "owner/repo",
        "inputs": {"trace": "auto", "tensorflow": "true"},
    }
    result, outputs = run_step("Choose the passes", context, tmp_path)
    assert result.returncode == 0, result.stderr
    assert outputs == {"flag": "--no-trace"}
