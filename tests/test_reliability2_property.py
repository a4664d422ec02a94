"""The other subcommands under random use (issue 32): hypothesis drives `mpdoctor plan`, `check --show-target` /
`--show-contexts` over hostile project declarations, and the Jupyter magic, with special files (FIFOs, sockets,
devices, symlink loops), and checks what tests/test_reliability_property.py checks for `check` (`merge` has its own
in tests/test_reliability2_merge.py):

- the exit code is 0, 1 or 2 (argparse's usage errors included); the magic returns a result or raises IPython's
  UsageError, nothing else;
- no traceback, no internal error and no raw control character in what is printed;
- nothing outside the example's folder changes, and special files are never replaced.

No example runs a model: `plan` is given only paths it must refuse before tracing (special files, a syntax error, a
notebook, a folder) and the magic only `--no-trace` checks, so each example costs milliseconds.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_reliability_property import EXAMPLES, MODEL, make_folder, run_in, state

SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")
HOSTILE_NAME = "evil\x1b[31m\u202e.py"
UNTRACEABLE = ["fifo.py", "sock.py", "zero.py", "loop.py", "dir.py", "broken.py", "note.ipynb", "missing.py", "."]
OUTPUTS = ["out.txt", "model.py", "fifo.py", "dir.py", "/dev/null", "new/dir/out.html", "broken.py"]

# Project declaration files as a hostile repository commits them: name -> candidate contents.
DECLARATIONS = {
    "requirements.txt": [
        "-r /dev/zero\n",
        "-r fifo.py\n",
        "-r requirements.txt\n",
        "tensorflow==" + "9" * 5000 + "\n",
        "tensorflow[and-cuda]==2.15.0.post1\n",
        f"tensorflow==2.5.1  # {HOSTILE_NAME}\n",
        "\udcff\udcfe not utf-8\n",
    ],
    "Pipfile": ["packages = 5\n", "[packages]\ntensorflow = 5\n", "[packages\n"],
    "pyproject.toml": [
        '[tool.poetry.group]\ndev = "x"\n',
        "[project]\ndependencies = 5\n",
        '[project]\ndependencies = ["tensorflow==2.15", "tensorflow==1.15"]\n',
        "a = " + "[" * 3000 + "]" * 3000 + "\n",
        "v = " + "1" * 5000 + "\n",
    ],
    "Dockerfile": [
        "ARG V=2.4.0\nFROM tensorflow/tensorflow:${V}-gpu\n",
        "ENV A=${B:-${A}}\nRUN pip install tensorflow==${A}\n",
        "FROM nvcr.io/nvidia/tensorflow:21.02-tf2-py3\n" + "RUN true \\\n" * 2000 + "\n",
        f"FROM {HOSTILE_NAME}\n",
    ],
    "setup.py": ["from setuptools import setup\nsetup(install_requires=" + "[" * 400 + "]" * 400 + ")\n"],
    "environment.yml": ["dependencies: 5\n", "dependencies:\n  - pip:\n    - tensorflow==2.4\n", ":::\n"],
}


def _declarations() -> st.SearchStrategy[dict[str, str]]:
    entries = [st.tuples(st.just(name), st.sampled_from(texts)) for name, texts in DECLARATIONS.items()]
    return st.lists(st.one_of(entries), max_size=4, unique_by=lambda entry: entry[0]).map(dict)


def _run(folder: Path, argv: list[str]) -> tuple[int, str]:
    code, stdout, stderr = run_in(folder, argv)
    return code, stdout + stderr


@contextlib.contextmanager
def _example(declarations: dict[str, str] | None = None):
    """A fresh folder (the property test's files, special files, a hostile file name, `declarations`) beside an
    `outside` folder that must not change; yields the folder."""
    base = Path(tempfile.mkdtemp(prefix="mpdoctor-property2-"))
    sockets = []
    try:
        folder, outside = base / "work", base / "outside"
        folder.mkdir()
        outside.mkdir()
        (outside / "requirements.txt").write_text("tensorflow==2.15\n")
        (outside / "model.py").write_text(MODEL)
        sockets = make_folder(folder)
        (folder / HOSTILE_NAME).write_text(MODEL)
        for name, text in (declarations or {}).items():
            (folder / name).write_bytes(text.encode("utf-8", "surrogateescape"))
        before = state(outside)
        yield folder
        assert state(outside) == before
        for path in ("fifo.py", "zero.py", "loop.py"):  # special files are never replaced by a report
            assert not (folder / path).is_file() or (folder / path).is_symlink(), path
    finally:
        for server in sockets:
            server.close()
        shutil.rmtree(base, ignore_errors=True)


def _behaved(argv: list[str], code: int, printed: str) -> None:
    assert code in (0, 1, 2), (argv, code, printed)
    assert "Traceback" not in printed and "internal error" not in printed, (argv, printed)
    assert not RAW_CONTROL.search(printed.replace("\n", "").replace("\t", "")), (argv, printed)


def _plan_flags() -> st.SearchStrategy[list[str]]:
    numbers = st.sampled_from(["nan", "inf", "-1", "0", "abc", "1e400", "0.5", "²"])
    choices = [
        numbers.map(lambda v: ["--rtol", v]),
        numbers.map(lambda v: [f"--trace-timeout={v}"]),
        st.sampled_from(OUTPUTS).map(lambda v: ["-o", v]),
        st.sampled_from(OUTPUTS).map(lambda v: ["--html", v]),
        st.sampled_from(["fifo.py", "zero.py", "missing.npz", "dir.py", "note.ipynb"]).map(lambda v: ["--sample", v]),
        st.sampled_from(["fifo.py", "zero.py", "missing.toml", "dir.py"]).map(lambda v: ["--config", v]),
        st.sampled_from(["text", "json", "html"]).map(lambda v: ["--format", v]),
        st.sampled_from(["mixed_float16", "float16", "x"]).map(lambda v: ["--policy", v]),
        st.sampled_from([["--diff"], ["--fix"], ["--entry", "x y"], ["--bogus"]]),
    ]
    return st.lists(st.one_of(choices), max_size=4).map(lambda parts: [arg for part in parts for arg in part])


@SETTINGS
@given(path=st.sampled_from(UNTRACEABLE), flags=_plan_flags())
def test_plan_under_random_command_lines_exits_0_1_or_2_and_changes_nothing_outside(path, flags):
    with _example() as folder:
        argv = ["plan", *flags, path]
        code, printed = _run(folder, argv)
        _behaved(argv, code, printed)
        assert code == 2, (argv, printed)  # none of these paths can be planned
        assert (folder / "model.py").read_text() == MODEL, argv


@SETTINGS
@given(
    declarations=_declarations(),
    show=st.sampled_from(["--show-target", "--show-contexts"]),
    paths=st.lists(st.sampled_from(["model.py", HOSTILE_NAME, "sub", ".", "fifo.py", "broken.py"]), max_size=3),
    extra=st.sampled_from([[], ["--target-tensorflow", "9" * 5000], ["--target-tensorflow", "2.15"], ["-v"]]),
)
def test_show_target_and_contexts_over_hostile_declarations_exit_0_1_or_2(declarations, show, paths, extra):
    with _example(declarations) as folder:
        argv = ["check", "--no-trace", show, *extra, *paths]
        code, printed = _run(folder, argv)
        _behaved(argv, code, printed)


MAGIC_TOKENS = ["--no-trace", "--bogus", "model.py", HOSTILE_NAME, "fifo.py", "zero.py", "loop.py", "dir.py",
                "broken.py", "note.ipynb", "missing.py", "sub", "number", "'a b'", '"', "''", "."]  # fmt: skip


@pytest.fixture(scope="module")
def shell():
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "mpdoctor")
    ip.user_ns["number"] = 5
    return ip


@SETTINGS
@given(
    tokens=st.lists(st.sampled_from(MAGIC_TOKENS), max_size=3), cell=st.none() | st.sampled_from([MODEL, "def f(:", ""])
)
def test_the_jupyter_magic_under_random_lines_returns_a_result_or_a_usage_error(shell, tokens, cell):
    from IPython.core.error import UsageError

    line = " ".join(["--no-trace", *tokens])  # the static pass only: no example runs a model
    with _example() as folder:
        previous = os.getcwd()
        os.chdir(folder)
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    if cell is None:
                        result = shell.run_line_magic("mpdoctor", line)
                    else:
                        result = shell.run_cell_magic("mpdoctor", line, cell)
                    result._repr_html_()  # renders
                    shown = repr(result)  # what a terminal IPython prints
                except UsageError as exc:
                    shown = str(exc)
        finally:
            os.chdir(previous)
        printed = out.getvalue() + err.getvalue()
        assert "Traceback" not in printed + shown and "internal error" not in printed + shown, (line, printed)
        assert not RAW_CONTROL.search((printed + shown).replace("\n", "")), (line, shown)
