"""The command line through a real subprocess: exit codes, formats, config, errors as one line."""

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from mpdoctor.cli import main

SOFTMAX_HEAD = textwrap.dedent("""\
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([
        keras.Input((32,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    """)
SOFTMAX_LINE = 7
CLEAN = textwrap.dedent("""\
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([
        keras.Input((32,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax", dtype="float32"),
    ])
    """)


def mpdoctor(*args, cwd, env_extra=None, subprocess_run=False):
    """`mpdoctor ARGS` run from `cwd`: the command line's `main` in this process for the static pass (the same code
    `python -m mpdoctor` runs, a hundred times faster), a child process when the trace runs or `subprocess_run`."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(env_extra or {})
    if subprocess_run or ("--no-trace" not in args and args[:1] == ("check",)):
        return subprocess.run(
            [sys.executable, "-m", "mpdoctor", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120
        )
    return run_in_process(list(args), cwd=cwd, env=env)


def run_in_process(args: list[str], *, cwd, env: dict) -> subprocess.CompletedProcess:
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as exc:  # argparse: --help, --version, usage errors
                code = exc.code if isinstance(exc.code, int) else 0
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@pytest.fixture
def project(tmp_path):
    (tmp_path / "model.py").write_text(SOFTMAX_HEAD)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


def test_finding_exits_1_with_ruff_style_line_and_relative_path(project):
    result = mpdoctor("check", "--no-trace", "model.py", cwd=project)
    assert result.returncode == 1, result.stderr
    first = result.stdout.splitlines()[0]
    assert re.fullmatch(rf"model\.py:{SOFTMAX_LINE}:5: MP401 \[\*\] .+", first), first
    assert "Found 1 problem (1 error) in 1 file." in result.stdout


def test_clean_file_exits_0(project):
    result = mpdoctor("check", "--no-trace", "clean.py", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All checks passed" in result.stdout


def test_exit_zero_and_fail_on(project):
    assert mpdoctor("check", "--no-trace", "--exit-zero", "model.py", cwd=project).returncode == 0
    (project / "info_only.py").write_text("import keras\nx = 1  # noqa: MP401\n")  # MP002 is info
    assert mpdoctor("check", "--no-trace", "info_only.py", cwd=project).returncode == 0
    assert mpdoctor("check", "--no-trace", "--fail-on", "info", "info_only.py", cwd=project).returncode == 1


def test_syntax_error_is_one_line_exit_2_and_other_files_still_checked(project):
    (project / "broken.py").write_text("import keras\ndef f(:\n    pass\n")
    result = mpdoctor("check", "--no-trace", "broken.py", "model.py", cwd=project)
    assert result.returncode == 2
    assert result.stderr.strip() == "broken.py:2:7: syntax error: invalid syntax"
    assert f"model.py:{SOFTMAX_LINE}:5: MP401" in result.stdout
    assert "Traceback" not in result.stderr


def test_missing_path_and_unreadable_file_exit_2(project):
    result = mpdoctor("check", "--no-trace", "nope.py", cwd=project)
    assert result.returncode == 2 and result.stderr.strip() == "nope.py: no such file or directory"
    (project / "binary.py").write_bytes(b"\xff\xfe\x00garbage")
    result = mpdoctor("check", "--no-trace", "binary.py", cwd=project)
    assert result.returncode == 2 and result.stderr.startswith("binary.py: ") and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--select", "MP999"], "unknown rule selector 'MP999'"),
        (["--ignore", "E501"], "unknown rule selector 'E501'"),
        (["--format", "xml"], "invalid choice: 'xml'"),
        (["--fail-on", "fatal"], "invalid choice: 'fatal'"),
    ],
)
def test_usage_errors_exit_2_in_one_line(project, args, needle):
    result = mpdoctor("check", "--no-trace", *args, "model.py", cwd=project)
    assert result.returncode == 2
    assert needle in result.stderr and len(result.stderr.strip().splitlines()) <= 2  # argparse adds its usage line


def test_select_ignore_and_prefixes(project):
    assert mpdoctor("check", "--no-trace", "--ignore", "MP4", "model.py", cwd=project).returncode == 0
    assert mpdoctor("check", "--no-trace", "--select", "MP1,MP2", "model.py", cwd=project).returncode == 0
    assert (
        mpdoctor(
            "check", "--no-trace", "--select", "MP1", "--extend-select", "MP401", "model.py", cwd=project
        ).returncode
        == 1
    )


def test_json_schema_fields(project):
    result = mpdoctor("check", "--no-trace", "--format", "json", "model.py", cwd=project)
    data = json.loads(result.stdout)
    assert data["version"] == 1 and data["tool"]["name"] == "mpdoctor" and data["tool"]["version"]
    [d] = data["diagnostics"]
    assert {k: d[k] for k in ("code", "name", "severity", "path", "line", "column", "passes")} == {
        "code": "MP401",
        "name": "float16-output-activation",
        "severity": "error",
        "path": "model.py",
        "line": SOFTMAX_LINE,
        "column": 5,
        "passes": ["static"],
    }
    assert d["end_line"] == SOFTMAX_LINE and d["end_column"] > d["column"]
    assert d["confidence"] in ("high", "medium", "low")
    assert d["fix"]["applicability"] in ("safe", "unsafe") and d["fix"]["edits"]
    assert data["summary"]["by_severity"] == {"error": 1, "warning": 0, "info": 0}


def test_output_file_and_statistics(project):
    result = mpdoctor("check", "--no-trace", "--statistics", "-o", "report.txt", "model.py", cwd=project)
    assert result.returncode == 1 and result.stdout == ""
    text = (project / "report.txt").read_text()
    assert re.search(r"^\s+1  MP401  \[\*\] float16-output-activation$", text, re.M), text


def test_colour_controls(project):
    never = mpdoctor("check", "--no-trace", "--color", "always", "model.py", cwd=project)
    assert "\x1b[" in never.stdout
    assert "\x1b[" not in mpdoctor("check", "--no-trace", "model.py", cwd=project).stdout  # not a TTY
    assert "\x1b[" in mpdoctor("check", "--no-trace", "model.py", cwd=project, env_extra={"FORCE_COLOR": "1"}).stdout
    assert (
        "\x1b["
        not in mpdoctor(
            "check", "--no-trace", "model.py", cwd=project, env_extra={"FORCE_COLOR": "1", "NO_COLOR": "1"}
        ).stdout
    )


def test_directories_recurse_and_honour_exclude_and_per_file_ignores(project):
    (project / "pkg" / "sub").mkdir(parents=True)
    (project / "pkg" / "sub" / "head.py").write_text(SOFTMAX_HEAD)
    (project / "pkg" / "generated").mkdir()
    (project / "pkg" / "generated" / "head.py").write_text(SOFTMAX_HEAD)
    (project / ".venv").mkdir()
    (project / ".venv" / "head.py").write_text(SOFTMAX_HEAD)
    (project / "pyproject.toml").write_text(
        textwrap.dedent("""\
        [tool.mpdoctor]
        extend-exclude = ["generated"]
        per-file-ignores = { "model.py" = ["MP401"] }
        """)
    )
    result = mpdoctor("check", "--no-trace", "--format", "json", ".", cwd=project)
    paths = sorted(d["path"] for d in json.loads(result.stdout)["diagnostics"])
    assert paths == ["pkg/sub/head.py"]


@pytest.mark.parametrize(
    "toml,needle",
    [
        ("[tool.mpdoctor]\nselekt = ['MP4']\n", "unknown key 'selekt'"),
        ("[tool.mpdoctor]\nignore = ['MP777']\n", "unknown rule selector 'MP777'"),
        ("[tool.mpdoctor]\nfail-on = 'fatal'\n", "fail-on: expected one of error, warning, info"),
        ("[tool.mpdoctor\n", "invalid TOML"),
    ],
)
def test_bad_config_is_one_line_exit_2(project, toml, needle):
    (project / "pyproject.toml").write_text(toml)
    result = mpdoctor("check", "--no-trace", "model.py", cwd=project)
    assert result.returncode == 2
    assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_config_fail_on_and_cli_override(project):
    (project / "pyproject.toml").write_text("[tool.mpdoctor]\nignore = ['MP401']\n")
    assert mpdoctor("check", "--no-trace", "model.py", cwd=project).returncode == 0
    assert mpdoctor("check", "--no-trace", "--extend-select", "MP401", "model.py", cwd=project).returncode == 0
    # an explicit --select starts afresh (ruff semantics): the config's ignore no longer applies
    assert mpdoctor("check", "--no-trace", "--select", "MP401", "model.py", cwd=project).returncode == 1


def test_suppressions_and_unused_suppression(project):
    lines = SOFTMAX_HEAD.splitlines()
    lines[SOFTMAX_LINE - 1] += "  # noqa: MP401"
    lines[SOFTMAX_LINE - 2] += "  # mpdoctor: ignore[MP401]"
    (project / "model.py").write_text("\n".join(lines) + "\n")
    result = mpdoctor("check", "--no-trace", "--format", "json", "model.py", cwd=project)
    diags = json.loads(result.stdout)["diagnostics"]
    assert [(d["code"], d["line"]) for d in diags] == [("MP002", SOFTMAX_LINE - 1)]
    (project / "model.py").write_text("# mpdoctor: ignore-file\n" + SOFTMAX_HEAD)
    assert mpdoctor("check", "--no-trace", "model.py", cwd=project).returncode == 0


def test_rules_and_explain(project):
    rules = mpdoctor("rules", cwd=project)
    assert rules.returncode == 0
    assert re.search(r"^MP401\s+float16-output-activation\s+error\s+static,trace\s+yes\s", rules.stdout, re.M)
    explain = mpdoctor("explain", "MP201", cwd=project)
    assert explain.returncode == 0
    for heading in ("What it detects", "Why it breaks", "Bad", "Good", "Fix"):
        assert f"\n{heading}\n" in explain.stdout
    unknown = mpdoctor("explain", "MP999", cwd=project)
    assert unknown.returncode == 2 and "unknown rule" in unknown.stderr


def test_no_command_prints_help_and_exits_2(project):
    result = mpdoctor(cwd=project)
    assert result.returncode == 2 and "usage: mpdoctor" in result.stdout
