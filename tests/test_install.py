"""mpdoctor as a user installs it (issue 33): an sdist and a wheel built from a clean copy of the working tree, the
wheel installed into a fresh virtualenv without TensorFlow, then `mpdoctor check --no-trace` and the HTML report run
from it, outside any checkout (the templates and data files must ship); and the README's install lines run as
printed. pip reads every package from a local wheelhouse (--no-index): the dependencies' wheels are downloaded from
the package index once into the matrix cache (ci/matrix.py, $MPDOCTOR_MATRIX_CACHE), nothing else at test time.

Slow (virtualenvs and pip installs): deselect with `-m "not slow"`.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
import tomllib
from test_cli import CLEAN, SOFTMAX_HEAD
from test_notebook import softmax_notebook

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
README = (ROOT / "README.md").read_text(encoding="utf-8")
sys.path.insert(0, str(ROOT / "ci"))
from matrix import cache_dir  # noqa: E402  (standard library only)

# What pip needs besides the dependencies to build mpdoctor from source (pyproject's build-system).
BUILD = PYPROJECT["build-system"]["requires"]


def requirement_name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()


# ------------------------------------------------------------------------------------------ the README's lists


def readme_install_section() -> str:
    return README.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_lists_the_dependencies_pyproject_declares():
    """The Install section names every runtime dependency (by name, in pyproject's order) and the [tf] extra's."""
    section = " ".join(readme_install_section().split())
    needed = re.search(r"it needs only ((?:`[\w-]+`(?:, | and )?)+)", section)
    assert needed, "the Install section says what mpdoctor needs"
    listed = re.findall(r"`([\w-]+)`", needed.group(1))
    assert listed == [requirement_name(r) for r in PYPROJECT["project"]["dependencies"]]
    extra = re.search(r"The `\[tf\]` extra \(((?:`[^`]+`(?:, )?)+)\)", section)
    assert extra, "the Install section says what the [tf] extra installs"
    assert re.findall(r"`([^`]+)`", extra.group(1)) == [
        r if i == 0 else requirement_name(r) for i, r in enumerate(PYPROJECT["project"]["optional-dependencies"]["tf"])
    ]


def test_no_install_line_names_a_distribution_that_is_not_on_the_index():
    """Until a release is on the public index, every `pip install` of mpdoctor in the docs names a checkout or a
    git URL: `pip install mpdoctor` or "mpdoctor[tf]" alone fails with "No matching distribution"."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bare = re.compile(r"pip install (?:-\S+ )*['\"]?mpdoctor(?:\[[\w,]+\])?(?!\s*@)['\"]?(?=\s|$|`)")
    found = [
        f"{doc.name}: {line.strip()}" for doc in docs for line in doc.read_text().splitlines() if bare.search(line)
    ]
    assert found == []


# ------------------------------------------------------------------------------------------------ building


def source_copy(destination: Path) -> Path:
    """The working tree's tracked and new files (not ignored ones, not the untracked template symlink): what a clone
    with these changes would hold; nothing is built inside the repository."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        origin = ROOT / name
        if origin.is_file() and not origin.is_symlink():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, destination / name)
    return destination


def build(hook: str, source: Path, out: Path) -> Path:
    """Run the setuptools build backend's PEP 517 `hook` (build_sdist, build_wheel) in `source`, in a child process
    of this interpreter (no build isolation, no download)."""
    out.mkdir(parents=True, exist_ok=True)
    script = f"from setuptools import build_meta; print(build_meta.{hook}({str(out)!r}))"
    done = subprocess.run([sys.executable, "-c", script], cwd=source, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return out / done.stdout.strip().splitlines()[-1]


def wheelhouse() -> Path:
    """The dependencies' and the build backend's wheels, downloaded from the package index once per requirement set
    (beside ci/matrix.py's wheels)."""
    wheels = cache_dir() / "wheels"
    requirements = PYPROJECT["project"]["dependencies"] + BUILD
    key = hashlib.sha256(json.dumps([sys.version_info[:2], requirements]).encode()).hexdigest()[:10]
    stamp = wheels / f".downloaded-install-{key}"
    if not stamp.exists():
        wheels.mkdir(parents=True, exist_ok=True)
        download = [sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "-d", str(wheels)]
        done = subprocess.run(download + requirements, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"downloading the dependencies' wheels failed:\n{done.stderr}"
        stamp.touch()
    return wheels


class Environment:
    """A fresh virtualenv (no system site-packages) whose pip reads only the wheelhouse."""

    def __init__(self, path: Path, wheels: Path) -> None:
        venv.create(path, with_pip=True, clear=True)
        self.bin = path / "bin"
        self.env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": str(path),
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(wheels),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_CACHE_DIR": "1",
            "NO_COLOR": "1",
        }

    def run(self, command: str | list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
        """A command line (a string: run by bash as printed) with the venv first on PATH."""
        shell = ["bash", "-c", command] if isinstance(command, str) else command
        return subprocess.run(shell, cwd=cwd, env=self.env, capture_output=True, text=True, timeout=timeout)

    def mpdoctor(self, *args: str, cwd: Path) -> subprocess.CompletedProcess:
        return self.run([str(self.bin / "mpdoctor"), *args], cwd)


def user_project(directory: Path) -> Path:
    directory.mkdir()
    (directory / "model.py").write_text(SOFTMAX_HEAD)
    (directory / "clean.py").write_text(CLEAN)
    (directory / "demo.ipynb").write_text(json.dumps(softmax_notebook(), indent=1))
    # An NVIDIA container: its TensorFlow comes from the data file that ships in the package.
    (directory / "Dockerfile").write_text("FROM nvcr.io/nvidia/tensorflow:23.10-tf2-py3\n")
    return directory


def check_the_installed_command(environment: Environment, project: Path) -> None:
    """What a user does first with mpdoctor, from the installed command, outside the checkout."""
    from mpdoctor import __version__

    version = environment.mpdoctor("--version", cwd=project)
    assert version.stdout.splitlines()[:2] == [f"mpdoctor {__version__}", "tensorflow not installed"], version.stderr
    imported = environment.run(
        [str(environment.bin / "python"), "-c", "import mpdoctor; print(mpdoctor.__file__)"], project
    )
    assert not imported.stdout.startswith(str(ROOT)), imported.stdout  # the installed copy, not this checkout
    no_tf = environment.run([str(environment.bin / "python"), "-c", "import tensorflow"], project)
    assert no_tf.returncode == 1 and "No module named 'tensorflow'" in no_tf.stderr

    text = environment.mpdoctor("check", "--no-trace", "model.py", "clean.py", "demo.ipynb", cwd=project)
    assert text.returncode == 1, text.stderr
    assert "model.py:7:5: MP401" in text.stdout and "demo.ipynb:cell 3:line 5:col 5: MP401" in text.stdout
    assert (
        "Target: TensorFlow 2.13 from Dockerfile:1 -> Keras 2 (3 files); installed here: no TensorFlow" in text.stdout
    )
    assert text.stdout.endswith("in 3 files. 1 fixable with --fix ([*]), 1 fix for notebook cells (--diff shows it).\n")

    html = environment.mpdoctor("check", "--no-trace", "--format", "html", "-o", "report.html", ".", cwd=project)
    assert html.returncode == 1 and html.stdout == ""
    assert html.stderr == "mpdoctor: wrote report.html: 2 problems in 3 files\n"
    page = (project / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "MP401" in page and "</html>" in page

    target = environment.mpdoctor("check", "--show-target", "model.py", cwd=project)
    assert target.returncode == 0 and "TensorFlow: 2.13  [declared: Dockerfile:1]" in target.stdout, target.stderr


@pytest.mark.slow
def test_the_sdist_and_wheel_install_and_run_without_tensorflow(tmp_path):
    source = source_copy(tmp_path / "source")
    sdist = build("build_sdist", source, tmp_path / "dist")
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
        archive.extractall(tmp_path / "unpacked", filter="data")
    top = sdist.name.removesuffix(".tar.gz")
    assert f"{top}/reports/templates/report.html.j2" in names and f"{top}/README.md" in names
    # The wheel is built from the sdist: whatever the wheel needs, the sdist ships.
    wheel = build("build_wheel", tmp_path / "unpacked" / top, tmp_path / "dist")
    with zipfile.ZipFile(wheel) as archive:
        files = set(archive.namelist())
        metadata = archive.read(f"{top}.dist-info/METADATA").decode()
    for shipped in (
        "mpdoctor/_templates/report.html.j2",
        "mpdoctor/_templates/report.js",
        "mpdoctor/project/tensorflow_containers.toml",
        "mpdoctor/trace/child/__main__.py",
    ):
        assert shipped in files
    requires = [line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist: ")]
    assert [r for r in requires if "extra ==" not in r] == PYPROJECT["project"]["dependencies"]

    environment = Environment(tmp_path / "venv", wheelhouse())
    installed = environment.run([str(environment.bin / "pip"), "install", "-q", str(wheel)], tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    consistent = environment.run([str(environment.bin / "pip"), "check"], tmp_path)
    assert consistent.returncode == 0, consistent.stdout
    check_the_installed_command(environment, user_project(tmp_path / "project"))


def readme_install_lines() -> list[str]:
    """The pip commands of the README's Install section, as printed (comments cut)."""
    block = re.search(r"```bash\n(.*?)```", readme_install_section(), re.DOTALL)
    assert block, "the Install section shows the commands"
    return [line.split("  #", 1)[0].strip() for line in block.group(1).splitlines() if line.startswith("pip install")]


def test_the_readme_install_commands_name_a_checkout_or_a_git_url():
    lines = readme_install_lines()
    assert "pip install ." in lines
    assert 'pip install "mpdoctor @ git+https://github.com/mpdoctor/mpdoctor@<commit>"' in lines
    assert 'pip install "mpdoctor[tf] @ git+https://github.com/mpdoctor/mpdoctor@<commit>"' in lines


@pytest.mark.slow
def test_the_readme_install_commands_work_as_printed(tmp_path):
    """`pip install .` in a clone, and the git URL with the URL replaced by that clone (no network; `file://localhost`:
    pip 23 refuses a URL without a host) and `<commit>` by its commit, each into a fresh virtualenv without
    TensorFlow (the [tf] line is the same with TensorFlow: not downloaded here). pip builds mpdoctor with build
    isolation, its backend from the wheelhouse. The clone holds this repository's commits: what the README installs
    is the committed tree."""
    clone = tmp_path / "mpdoctor"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=300)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=clone, check=True, capture_output=True, text=True
    ).stdout.strip()
    wheels = wheelhouse()
    project = user_project(tmp_path / "project")
    for number, line in enumerate(line for line in readme_install_lines() if "[tf]" not in line):
        command = line.replace("https://github.com/mpdoctor/mpdoctor", f"file://localhost{clone}").replace(
            "<commit>", commit
        )
        environment = Environment(tmp_path / f"venv{number}", wheels)
        installed = environment.run(command, clone)
        assert installed.returncode == 0, f"{command}\n{installed.stdout}{installed.stderr}"
        check_the_installed_command(environment, project)
