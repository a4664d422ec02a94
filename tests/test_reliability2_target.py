"""Hostile project files and projects (issue 32, ../shared/repros/reliability-2/09-12): reading what a project
declares never hangs, never exhausts memory, never crashes and stays linear in the size of the file; the project
analysis follows a cross-module chain of any depth. A malformed declaration is ignored with a note; the run goes on
and its findings are kept.

Cases that could hang (a FIFO) or take minutes when quadratic run mpdoctor in a child process whose timeout is only
a hang guard; the others run in this process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from test_reliability import MODEL, one_line_errors, run_cli, run_main

from mpdoctor.project import declared, target

PYPROJECT = '[project]\nname = "x"\n'


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """A project root with the model (MP401 on line 3 under any target), the current directory (origins are shown
    relative to it)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "m.py").write_text(MODEL)
    target.new_run()
    return tmp_path


def check(project: Path, *options: str) -> tuple[int, str, str]:
    """`check --no-trace -v m.py` in this process; the run must end with MP401 and no internal error."""
    code, out, err = run_main("check", "--no-trace", "-v", *options, "m.py", cwd=project)
    one_line_errors(err)
    assert code == 1 and "MP401" in out, (code, out, err)
    return code, out, err


def declared_in(project: Path) -> tuple[list, list[str]]:
    notes: list[str] = []
    return declared.declarations_in(project, notes), notes


# ------------------------------------------------------------------------------- 09: includes of special files


def test_R09_requirements_include_of_dev_zero_is_refused_with_a_note(project):
    (project / "requirements.txt").write_text("-r /dev/zero\ntensorflow==2.15\n")
    found, notes = declared_in(project)
    assert [d.text for d in found] == ["tensorflow==2.15"]  # the rest of the file is still read
    assert notes == ["requirements.txt:1: /dev/zero: not read: not a regular file (a character device)"]
    _, out, err = check(project)
    assert "/dev/zero: not read" in err and "TensorFlow ==2.15 from requirements.txt:2" in out


def test_R09_requirements_include_of_a_fifo_never_blocks(project):
    os.mkfifo(project / "pipe.txt")
    (project / "requirements.txt").write_text("-r pipe.txt\n")
    result = run_cli("check", "--no-trace", "-v", "m.py", cwd=project, timeout=120)  # the timeout: a hang guard
    one_line_errors(result.stderr)
    assert result.returncode == 1 and "MP401" in result.stdout
    assert "pipe.txt: not read: not a regular file (a FIFO)" in result.stderr


def test_R09_oversized_include_is_refused(project, monkeypatch):
    monkeypatch.setattr("mpdoctor.project.requirements.CONFIG_LIMIT", 2**20)
    (project / "big.txt").write_bytes(b"# padding\n" * (2**20 // 10 + 1))
    (project / "requirements.txt").write_text("-r big.txt\n")
    _, notes = declared_in(project)
    assert notes == ["requirements.txt:1: big.txt: not read: too large for a project file (more than 1 MiB)"]


# ------------------------------------------------------------------------------- 10: malformed declarations


@pytest.mark.parametrize(
    "name,text,note",
    [
        ("Pipfile", "packages = 5\n[dev-packages]\ntensorflow = '==2.9'\n", None),
        ("pyproject.toml", PYPROJECT + '[tool.poetry.group]\ndev = "x"\n', None),
        ("pyproject.toml", PYPROJECT + "[tool.poetry.dependencies]\ntensorflow = '^" + "9" * 5000 + "'\n", None),
        ("Pipfile", "x = " + "9" * 5000 + "\n", "Pipfile: not read: ValueError"),
        ("Pipfile", "x = " + "[" * 5000 + "]" * 5000 + "\n", "Pipfile: not read: RecursionError"),
        ("requirements.txt", "tensorflow==" + "9" * 5000 + "\n", None),
        ("Dockerfile", "FROM tensorflow/tensorflow:" + "9" * 5000 + "\n", None),
        ("setup.py", "import setuptools\nx = " + "not " * 60000 + "1\nsetuptools.setup()\n", "setup.py: not read:"),
        ("setup.cfg", "[options\n", "setup.cfg: not read: MissingSectionHeaderError"),
    ],
    ids=[
        "pipfile-int",
        "poetry-group-str",
        "poetry-5000-digits",
        "toml-5000-digits",
        "toml-deep",
        "req-5000-digits",
        "image-5000-digits",
        "setup-py-deep",
        "setup-cfg-broken",
    ],
)
def test_R10_malformed_declaration_is_ignored_with_a_note(project, name, text, note):
    (project / name).write_text(text)
    found, notes = declared_in(project)
    assert all(not d.releases or d.releases == frozenset({(2, 9)}) for d in found), found
    if note is None:
        assert not notes
    else:
        [said] = notes
        assert said.startswith(note) and len(said) < 300  # the reason, never the whole offending value
    check(project)


def test_R10_pipfile_keeps_its_readable_section(project):
    (project / "Pipfile").write_text("packages = 5\n[dev-packages]\ntensorflow = '==2.9'\n")
    [declaration], _ = declared_in(project)
    assert declaration.releases == frozenset({(2, 9)}) and declaration.origin == "Pipfile:3"


def test_R10_version_of_thousands_of_digits_says_nothing(project):
    (project / "requirements.txt").write_text("tensorflow==" + "9" * 5000 + "\n")
    [declaration], _ = declared_in(project)
    assert declaration.releases is None and declaration.note == "not a version specifier mpdoctor can read"


def test_R10_pyproject_number_of_thousands_of_digits_is_a_usage_error(project):
    """pyproject.toml is also the configuration: invalid TOML there is a one-line error (TOML integers are 64-bit)."""
    (project / "pyproject.toml").write_text(PYPROJECT + "x = " + "9" * 5000 + "\n")
    code, _, err = run_main("check", "--no-trace", "m.py", cwd=project)
    [line] = one_line_errors(err)
    assert code == 2 and line.endswith("pyproject.toml: invalid TOML: a number too long to read")


def test_R10_target_tensorflow_of_thousands_of_digits_is_a_usage_error(project):
    code, _, err = run_main("check", "--no-trace", "--target-tensorflow", "9" * 5000, "m.py", cwd=project)
    [line] = one_line_errors(err)
    assert code == 2 and "target-tensorflow" in line


def test_R10_chained_includes_stop_with_a_note(project):
    (project / "requirements.txt").write_text("-r r1.txt\n")
    for i in range(1, 3000):
        (project / f"r{i}.txt").write_text(f"-r r{i + 1}.txt\n")
    (project / "r3000.txt").write_text("tensorflow==2.15\n")
    found, notes = declared_in(project)
    assert found == [] and notes == ["r16.txt:1: r17.txt not read: includes nested more than 16 deep"]
    check(project)


def test_R10_includes_nested_within_the_limit_are_read(project):
    (project / "requirements.txt").write_text("-r r1.txt\n")
    for i in range(1, 16):
        (project / f"r{i}.txt").write_text(f"-r r{i + 1}.txt\n")
    (project / "r16.txt").write_text("tensorflow==2.15\n")
    [declaration], notes = declared_in(project)
    assert declaration.origin == "r16.txt:1 (via requirements.txt)" and not notes


# ------------------------------------------------------------------------------- 11: linear parsers


def test_R11_pyproject_lines_are_indexed_once(project, monkeypatch):
    """Each dependency's line comes from one index of the file, not a rescan per dependency (20,000 took 168 s)."""
    deps = ",\n".join(f'  "tensorflow-addon{i}>=1"' for i in range(2000))
    (project / "pyproject.toml").write_text(f'{PYPROJECT}dependencies = [\n{deps},\n  "tensorflow==2.15"\n]\n')
    scans = []
    index = declared._Lines._index
    monkeypatch.setattr(declared._Lines, "_index", lambda self, pattern: scans.append(1) or index(self, pattern))
    [declaration], _ = declared_in(project)
    assert declaration.origin == "pyproject.toml:2004 ([project] dependencies)" and len(scans) == 1


def test_R11_indexed_lines_are_those_of_the_values(project):
    (project / "pyproject.toml").write_text(
        PYPROJECT + 'dependencies = [\n  "numpy",\n\n  "tensorflow==2.15",\n]\n'
        "[tool.poetry.group.gpu.dependencies]\n\n\n  tensorflow-gpu = '^2.15'\n"
    )
    found, _ = declared_in(project)
    assert [d.origin.split(" ")[0] for d in found] == ["pyproject.toml:6", "pyproject.toml:11"]


def test_R11_large_declaration_files_are_read_in_linear_time(project):
    """50,000 dependencies and 400,000 continued Dockerfile lines: seconds when linear, hours when quadratic (the
    child's timeout is a hang guard, not a measure)."""
    deps = ",\n".join(f'  "tensorflow-addon{i}>=1"' for i in range(50_000))
    (project / "pyproject.toml").write_text(f"{PYPROJECT}dependencies = [\n{deps}\n]\n")
    (project / "Dockerfile").write_text(
        "FROM python:3.11\nRUN pip install \\\n" + "  numpy==1.0 \\\n" * 400_000 + "  tensorflow==2.15\n"
    )
    result = run_cli("check", "--no-trace", "--show-target", "m.py", cwd=project, timeout=300)
    one_line_errors(result.stderr)
    assert "TensorFlow: ==2.15  [declared: Dockerfile:2]" in result.stdout


def test_R11_dockerfile_comment_inside_a_continued_instruction(project):
    (project / "Dockerfile").write_text("FROM python:3.11\nRUN pip install \\\n  # pinned\n  tensorflow==2.13\n")
    [declaration], _ = declared_in(project)
    assert declaration.releases == frozenset({(2, 13)}) and declaration.origin == "Dockerfile:2"


# ------------------------------------------------------------------------------- 12: deep cross-module chains


def deep_chain(root: Path, depth: int) -> None:
    """main.py sets mixed_float16 and calls pkg.m0.build(), which calls pkg.m1.build()... pkg.m{depth}.build()
    builds the model (the reproduction's project)."""
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n')
    (root / "main.py").write_text(
        "import keras\nimport pkg.m0\nkeras.mixed_precision.set_global_policy('mixed_float16')\npkg.m0.build()\n"
    )
    for i in range(depth):
        (root / "pkg" / f"m{i}.py").write_text(
            f"import pkg.m{i + 1}\nimport pkg\ndef build():\n    return pkg.m{i + 1}.build()\n"
        )
    (root / "pkg" / f"m{depth}.py").write_text(
        "import keras\ndef build():\n"
        "    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation='softmax')])\n"
    )


@pytest.mark.parametrize("depth", [60, 249])
def test_R12_deep_cross_module_chain_is_followed_to_its_end(tmp_path, depth):
    deep_chain(tmp_path, depth)
    limit = sys.getrecursionlimit()
    code, out, err = run_main("check", "--no-trace", ".", cwd=tmp_path)
    one_line_errors(err)
    assert sys.getrecursionlimit() == limit
    assert code == 1 and f"pkg/m{depth}.py:3" in out and "MP401" in out, out


def test_R12_deeply_nested_expression_in_an_entry_point(tmp_path):
    """An expression nested 1,500 deep (it parses) is walked for its calls without recursion."""
    deep_chain(tmp_path, 1)
    main_py = tmp_path / "main.py"
    main_py.write_text(main_py.read_text() + "x = pkg" + ".b" * 1500 + "\n")
    code, out, err = run_main("check", "--no-trace", ".", cwd=tmp_path)
    one_line_errors(err)
    assert code == 1 and "pkg/m1.py:3" in out and "MP401" in out, out
