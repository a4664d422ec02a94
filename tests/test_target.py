"""The TensorFlow/Keras target of a file: every source (configuration, each kind of project file, the file's own
code, the installed environment), their precedence and their conflicts. The installed environment is held fixed
(TF 2.21 with tf_keras and keras 3 unless a test says otherwise), so only the sources under test vary."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest

from mpdoctor.config import Config, ConfigError, apply_overrides, load_config
from mpdoctor.project import environment, evidence, target
from mpdoctor.project.target import CONFIG, DECLARED, DEFAULT, ENVIRONMENT, FILE, Overrides, target_for

TF_KERAS = "import tensorflow as tf\nmodel = tf.keras.Sequential([tf.keras.layers.Dense(2)])\n"
GET_SCALED_LOSS = TF_KERAS + "scaled = optimizer.get_scaled_loss(loss)\n"
KERAS_OPS = "import tensorflow as tf\nfrom tensorflow import keras\ny = keras.ops.softmax(x)\n"
TF1 = "import tensorflow as tf\nx = tf.placeholder(tf.float32, [None, 4])\nsess = tf.Session()\n"


@pytest.fixture(autouse=True)
def installed(monkeypatch):
    """TF 2.21 installed, TF_USE_LEGACY_KERAS unset, and a fresh read of project files per test."""
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    monkeypatch.setattr(environment, "tensorflow_version", lambda: (2, 21))
    monkeypatch.setattr(environment, "standalone_keras_major", lambda: 3)
    target.new_run()


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A project root (its .git stops the search for declarations), the current directory (origins are shown
    relative to it)."""
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def resolve(directory: Path, source: str = TF_KERAS, name: str = "model.py", **overrides):
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    target.new_run()
    return target_for(str(path), ast.parse(source), source, Overrides(**overrides))


def releases(*minors: int, major: int = 2) -> frozenset:
    return frozenset((major, m) for m in minors)


# ------------------------------------------------------------------------------------------ project files


def test_requirements_txt_pins_keras2(project):
    (project / "requirements.txt").write_text("numpy\ntensorflow>=2.12,<2.16  # GPU box\n")
    t = resolve(project)
    assert t.releases == releases(12, 13, 14, 15)
    assert (t.tensorflow_text, t.tensorflow_origin, t.tensorflow_source) == (
        ">=2.12,<2.16",
        "requirements.txt:2",
        DECLARED,
    )
    assert t.keras_major == 2 and t.keras_certain


def test_requirements_includes_and_constraints(project):
    (project / "requirements").mkdir()
    (project / "requirements" / "base.txt").write_text("tensorflow-gpu==2.4.1\n")
    (project / "requirements-dev.txt").write_text("-r requirements/base.txt\npytest\n")
    t = resolve(project)
    assert t.releases == releases(4) and "requirements/base.txt:1" in t.tensorflow_origin
    (project / "requirements" / "base.txt").unlink()
    (project / "constraints.txt").write_text("tensorflow==2.10.1\n")
    assert resolve(project).releases == releases(10)


def test_pyproject_pep621_optional_groups_and_poetry(project):
    (project / "pyproject.toml").write_text(
        textwrap.dedent("""
        [project]
        name = "x"
        dependencies = ["numpy"]
        [project.optional-dependencies]
        gpu = ["tensorflow[and-cuda]==2.15.*"]
        """)
    )
    t = resolve(project)
    assert t.releases == releases(15) and "[project.optional-dependencies] gpu" in t.tensorflow_origin
    (project / "pyproject.toml").write_text('[tool.poetry.dependencies]\npython = "^3.9"\ntensorflow = "^2.10"\n')
    assert resolve(project).releases == releases(*range(10, 22))
    (project / "pyproject.toml").write_text(
        '[tool.poetry.dependencies]\ntensorflow = {version = "~2.11", optional = true}\n'
    )
    assert resolve(project).releases == releases(11)


def test_setup_cfg_and_setup_py_are_read_never_run(project):
    (project / "setup.cfg").write_text("[options]\ninstall_requires =\n    numpy\n    tensorflow>=2.8,<2.10\n")
    assert resolve(project).releases == releases(8, 9)
    (project / "setup.cfg").unlink()
    marker = project / "executed"
    (project / "setup.py").write_text(
        textwrap.dedent(f"""
        from setuptools import setup
        open({str(marker)!r}, "w").write("setup.py was executed")
        REQUIRED = ["numpy", "tensorflow==2.6.2"]
        setup(name="x", install_requires=REQUIRED + ["pillow"], extras_require={{"hub": ["tensorflow-hub"]}},
              keywords=["tensorflow", "keras"])
        """)
    )
    t = resolve(project)
    assert t.releases == releases(6) and t.tensorflow_origin == "setup.py:4"
    assert t.hub and t.hub_origin.startswith("setup.py")
    assert not marker.exists()


def test_pipfile_and_conda_environment(project):
    (project / "Pipfile").write_text('[packages]\ntensorflow = "==2.9.0"\n')
    assert resolve(project).releases == releases(9)
    (project / "Pipfile").unlink()
    (project / "environment.yml").write_text(
        "name: x\ndependencies:\n  - python=3.8\n  - conda-forge::tensorflow-gpu=2.4\n"
        "  - pip:\n    - tensorflow-hub==0.12\n"
    )
    t = resolve(project)
    assert t.releases == releases(4) and t.tensorflow_origin == "environment.yml:4" and t.hub


@pytest.mark.parametrize(
    "image,expected",
    [
        ("nvcr.io/nvidia/tensorflow:22.12-tf2-py3", releases(10)),
        ("nvcr.io/nvidia/tensorflow:21.04-tf2-py3", releases(4)),
        ("nvcr.io/nvidia/tensorflow:23.03-tf1-py3", releases(15, major=1)),
        ("tensorflow/tensorflow:2.11.0-gpu", releases(11)),
        ("tensorflow/tensorflow:1.15.5-gpu-py3", releases(15, major=1)),
        ("gcr.io/deeplearning-platform-release/tf2-gpu.2-8", releases(8)),
        ("763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-training:2.13.0-gpu-py310", releases(13)),
    ],
)
def test_dockerfile_from_a_tensorflow_image(project, image, expected):
    (project / "Dockerfile").write_text(f"FROM {image}\nRUN pip install pillow\n")
    t = resolve(project)
    assert t.releases == expected and t.tensorflow_origin == "Dockerfile:1"


def test_dockerfile_args_env_and_pip_install(project):
    (project / "docker").mkdir()
    (project / "docker" / "Dockerfile").write_text(
        "ARG TAG=22.03-tf2-py3\nFROM nvcr.io/nvidia/tensorflow:${TAG}\nENV TF_USE_LEGACY_KERAS=1\n"
    )
    t = resolve(project)
    assert t.releases == releases(8) and t.tensorflow_origin == "docker/Dockerfile:2"
    (project / "docker" / "Dockerfile").write_text(
        "FROM python:3.10\nRUN pip install --no-cache-dir \\\n    numpy tensorflow==2.16.1 && rm -rf /tmp\n"
        "ENV TF_USE_LEGACY_KERAS=1\n"
    )
    t = resolve(project)
    assert t.releases == releases(16) and t.keras_major == 2  # TF 2.16 with TF_USE_LEGACY_KERAS=1 declared
    assert "TF_USE_LEGACY_KERAS" in t.keras_origin


def test_unknown_container_tag_is_ignored_and_said(project):
    (project / "Dockerfile").write_text("FROM nvcr.io/nvidia/tensorflow:26.01-tf2-py3\n")
    t = resolve(project)
    # Declared, so not the installed TensorFlow; unread, so any TF 2 (Keras 2 or 3: rules report at lower confidence).
    assert t.tensorflow_source == DECLARED and t.releases == releases(*range(22)) and not t.keras_certain
    assert any("not in mpdoctor's table" in line for line in t.describe())


def test_unpinned_dependency_means_any_release(project):
    (project / "requirements.txt").write_text("tensorflow\n")
    t = resolve(project)
    assert t.releases == releases(*range(22)) and t.keras_majors == {2, 3}
    assert t.keras_major == 3 and not t.keras_certain


def test_closest_declaring_directory_wins_up_to_the_project_root(project):
    (project / "requirements.txt").write_text("tensorflow>=2.16\n")
    (project / "examples" / "old").mkdir(parents=True)
    (project / "examples" / "old" / "requirements.txt").write_text("tensorflow==2.3.0\n")
    assert resolve(project / "examples" / "old").releases == releases(3)
    assert resolve(project / "src").releases == releases(*range(16, 22))
    inner = project / "vendored"
    inner.mkdir()
    (inner / "setup.py").write_text("from setuptools import setup\nsetup(name='v')\n")  # a root that declares nothing
    assert resolve(inner).tensorflow_source == ENVIRONMENT
    utils = project / "src" / "utils"
    utils.mkdir(parents=True)
    (utils / "setup.py").write_text("def set_flags():\n    pass\n")  # a module named setup.py: not a root
    assert resolve(utils).releases == releases(*range(16, 22))


# --------------------------------------------------------------------------------------- the file's evidence


def test_file_choosing_tf_keras_is_keras2_whatever_the_pin(project):
    (project / "requirements.txt").write_text("tensorflow>=2.16\ntf-keras\n")
    t = resolve(project, "import tf_keras as keras\nmodel = keras.Sequential()\n")
    assert t.keras_major == 2 and t.keras_source == FILE and t.keras_origin == "this file imports tf_keras"
    t = resolve(project, 'import os\nos.environ["TF_USE_LEGACY_KERAS"] = "1"\n' + TF_KERAS)
    assert t.keras_major == 2 and t.keras_origin == "this file sets TF_USE_LEGACY_KERAS=1"


def test_flagged_keras2_api_without_a_pin_is_judged_on_the_installed_keras3(project):
    """Issue 29: get_scaled_loss is what MP103 reports on Keras 3, so it never makes the file Keras 2 (that
    silenced the rule on a script that fails here); MP003's note says what the file looks written for."""
    t = resolve(project, GET_SCALED_LOSS)
    assert t.tensorflow_source == ENVIRONMENT and t.releases == {(2, 21)}
    assert t.keras_major == 3 and t.keras_source == ENVIRONMENT and not t.differs_from_installed
    [note] = t.conflicts
    assert note.note and note.line == 3 and "looks written for Keras 2 (get_scaled_loss, line 3)" in note.message


def test_keras2_api_under_a_keras3_pin_is_judged_keras3(project):
    """Old code in a project pinned to Keras 3: the pin wins (MP103 reports the API), no MP003."""
    (project / "requirements.txt").write_text("tensorflow>=2.16\n")
    t = resolve(project, GET_SCALED_LOSS)
    assert t.keras_major == 3 and t.keras_source == DECLARED and not t.conflicts


def test_flagged_keras2_api_does_not_narrow_a_range_that_allows_both(project):
    """The range decides (Keras 3 at lower confidence: MP103 reports on the Keras 3 part), not the API MP103
    reports; the range is declared, so no note either."""
    (project / "requirements.txt").write_text("tensorflow>=2.12\n")
    t = resolve(project, GET_SCALED_LOSS)
    assert t.keras_major == 3 and t.keras_source == DECLARED and not t.keras_certain and not t.conflicts


def test_flagged_keras2_api_under_an_unpinned_declaration_gets_the_note(project):
    """An unpinned `tensorflow` (GradientAccumulator's setup.py, issue 29) chooses no more than nothing declared: a
    fresh install is Keras 3, so the note says what the file looks written for and to pin TensorFlow."""
    (project / "requirements.txt").write_text("tensorflow\n")
    t = resolve(project, GET_SCALED_LOSS)
    assert t.keras_major == 3 and t.keras_source == DECLARED
    [note] = t.conflicts
    assert note.note and note.message.startswith("this file looks written for Keras 2 (get_scaled_loss, line ")
    assert "pin TensorFlow (its declaration allows any release: Keras 2 and 3)" in note.message


def test_keras3_api_under_a_keras2_pin_wins_and_conflicts(project):
    """The issue's example: a pin says <2.16 but the file uses keras.ops: Keras 3, and MP003's conflict."""
    (project / "requirements.txt").write_text("tensorflow>=2.12,<2.16\n")
    t = resolve(project, KERAS_OPS)
    assert t.releases == releases(12, 13, 14, 15)  # the TensorFlow range stays the pin's
    assert t.keras_major == 3 and t.keras_source == FILE
    [conflict] = t.conflicts
    assert conflict.line == 3 and "requirements.txt:1" in conflict.message and "keras.ops" in conflict.message


def test_tf1_api_gives_a_tf1_range_or_a_conflict_with_a_tf2_pin(project):
    t = resolve(project, TF1)
    assert t.tensorflow_source == FILE and all(r[0] == 1 for r in t.releases) and t.keras_major == 2
    (project / "requirements.txt").write_text("tensorflow==2.4.0\n")
    t = resolve(project, TF1)
    assert t.releases == releases(4)
    assert [c.line for c in t.conflicts] == [2] and "tf.placeholder" in t.conflicts[0].message


def test_compat_v1_graph_code_is_keras2_era(project):
    source = "import tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()\nx = tf.placeholder(tf.float32)\n"
    t = resolve(project, source)
    assert t.keras_major == 2 and t.tensorflow_source == ENVIRONMENT  # compat.v1 runs on TF 2.21


def test_clues_need_their_own_spelling_not_mixed_precision(project, monkeypatch):
    """The walk for clues runs only on a file that spells one (bench/static.py: every synthetic file sets a
    policy through keras.mixed_precision, none has a clue); the experimental API and a TF1 optimizer imported
    from tf.train are still found."""
    policy = "import tensorflow as tf\ntf.keras.mixed_precision.set_global_policy('mixed_float16')\n"
    experimental = "from tensorflow.keras.mixed_precision import experimental as mp\nmp.set_policy('mixed_float16')\n"
    tf1_optimizer = "import tensorflow as tf\nfrom tensorflow.train import AdamOptimizer\nopt = AdamOptimizer(0.1)\n"
    assert [c.what for c in resolve(project, experimental).clues] == ["mixed_precision.experimental"]
    assert [c.what for c in resolve(project, tf1_optimizer).clues] == ["tf.train.AdamOptimizer"]

    def no_walk(*_args):
        raise AssertionError("the clue walk ran on a file without a clue's spelling")

    monkeypatch.setattr(evidence, "_clues", no_walk)
    assert resolve(project, policy).clues == ()


def test_standalone_keras_follows_its_own_pin(project):
    (project / "requirements.txt").write_text("tensorflow==2.15.*\nkeras<3\n")
    assert resolve(project, "import keras\nm = keras.Sequential()\n").keras_major == 2
    (project / "requirements.txt").write_text("tensorflow==2.15.*\n")
    assert resolve(project, "import keras\nm = keras.Sequential()\n").keras_major == 2  # keras 2.15 with TF 2.15


# ---------------------------------------------------------------------------------------- configuration


def test_configuration_beats_every_other_source(project):
    (project / "requirements.txt").write_text("tensorflow==2.10\n")
    t = resolve(project, KERAS_OPS, target_tensorflow=">=2.16", target_tensorflow_origin="--target-tensorflow")
    assert t.tensorflow_source == CONFIG and t.releases == releases(*range(16, 22)) and not t.conflicts
    t = resolve(project, KERAS_OPS, keras_version=2, keras_version_origin="--keras-version")
    assert t.keras_major == 2 and t.keras_source == CONFIG and t.releases == releases(10)


def test_target_tensorflow_option_and_key_are_validated(tmp_path):
    config = Config()
    apply_overrides(config, "command line", target_tensorflow="2.15")
    assert config.target_tensorflow == "==2.15.*" and config.target_tensorflow_origin == "--target-tensorflow"
    for bad in ("banana", ">=9", True):
        with pytest.raises(ConfigError, match="target-tensorflow"):
            apply_overrides(Config(), "command line", target_tensorflow=bad)
    (tmp_path / "pyproject.toml").write_text('[tool.mpdoctor]\ntarget-tensorflow = ">=2.12,<2.16"\nkeras-version = 2\n')
    config = load_config(tmp_path)
    assert config.target_tensorflow == ">=2.12,<2.16" and config.keras_version == 2
    assert config.target_tensorflow_origin.startswith("[tool.mpdoctor] target-tensorflow in ")


def test_environment_last_and_default_when_nothing_is_installed(project, monkeypatch):
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    t = resolve(project)
    assert t.tensorflow_source == ENVIRONMENT and t.keras_major == 2 and not t.differs_from_installed
    monkeypatch.delenv("TF_USE_LEGACY_KERAS")
    monkeypatch.setattr(environment, "tensorflow_version", lambda: None)
    t = resolve(project)
    assert t.tensorflow_source == DEFAULT and t.keras_major == 3 and not t.keras_certain


def test_declarations_of_a_linked_file_are_those_beside_its_real_file(project):
    """Directories are resolved once per run; a file that is a link to another directory still gets the
    declarations of the directory it really is in."""
    (project / "real").mkdir()
    (project / "real" / "requirements.txt").write_text("tensorflow==2.10\n")
    (project / "real" / "model.py").write_text(TF_KERAS)
    (project / "linked").mkdir()
    (project / "linked" / "requirements.txt").write_text("tensorflow==2.12\n")
    (project / "linked" / "beside.py").write_text(TF_KERAS)
    (project / "linked" / "model.py").symlink_to(project / "real" / "model.py")
    target.new_run()
    beside = target_for(str(project / "linked" / "beside.py"), ast.parse(TF_KERAS), TF_KERAS)
    linked = target_for(str(project / "linked" / "model.py"), ast.parse(TF_KERAS), TF_KERAS)
    assert beside.releases == releases(12) and linked.releases == releases(10)


def test_declarations_are_cached_per_run(project):
    (project / "requirements.txt").write_text("tensorflow==2.10\n")
    path = project / "a.py"
    path.write_text(TF_KERAS)
    target.new_run()
    first = target_for(str(path), ast.parse(TF_KERAS), TF_KERAS)
    (project / "requirements.txt").write_text("tensorflow==2.11\n")
    assert target_for(str(path), ast.parse(TF_KERAS), TF_KERAS).releases == first.releases  # same run: cached
    target.new_run()
    assert target_for(str(path), ast.parse(TF_KERAS), TF_KERAS).releases == releases(11)


# ----------------------------------------------------------------------------------------- the command line


def run_cli(args: list[str], cwd: Path, capsys, monkeypatch) -> tuple[int, str, str]:
    from mpdoctor.cli import main

    monkeypatch.chdir(cwd)
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_show_target_json_target_and_the_summary_line(project, capsys, monkeypatch):
    (project / "requirements.txt").write_text("tensorflow>=2.12,<2.16\n")
    (project / "train.py").write_text(GET_SCALED_LOSS)
    code, out, err = run_cli(["check", "--show-target", "train.py"], project, capsys, monkeypatch)
    assert code == 0 and err == ""
    assert out.splitlines()[0] == "train.py"
    assert "TensorFlow: >=2.12,<2.16  [declared: requirements.txt:1]" in out and "Keras: 2" in out
    code, out, _ = run_cli(["check", "--no-trace", "--format", "json", "train.py"], project, capsys, monkeypatch)
    [entry] = json.loads(out)["files"]
    assert entry["path"] == "train.py"
    assert entry["target"]["tensorflow"]["range"] == ">=2.12,<2.16" and entry["target"]["keras"]["major"] == 2
    assert entry["target"]["tensorflow"]["origin"] == "requirements.txt:1"
    code, out, _ = run_cli(["check", "--no-trace", "train.py"], project, capsys, monkeypatch)
    assert "Target: TensorFlow >=2.12,<2.16 from requirements.txt:1 -> Keras 2 (1 file)" in out


def test_bad_target_option_is_one_line_exit_2(project, capsys, monkeypatch):
    (project / "m.py").write_text(TF_KERAS)
    code, out, err = run_cli(
        ["check", "--no-trace", "--target-tensorflow", "2.x", "m.py"], project, capsys, monkeypatch
    )
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "target-tensorflow" in err


# ------------------------------------------------------------------ issue 29: declarations read as they are meant


@pytest.mark.parametrize(
    "dockerfile,expected",
    [
        # The two forms: an ARG or an ENV default, then pip install with the variable.
        ("FROM python:3.8\nARG TENSORFLOW_VERSION=2.4.0\nRUN pip install tensorflow==${TENSORFLOW_VERSION}\n", 4),
        ("FROM python:3.8\nENV TENSORFLOW_VERSION=2.4.0\nRUN pip install tensorflow==${TENSORFLOW_VERSION}\n", 4),
        (
            "FROM python:3.8\nARG TF_PIP=tensorflow-gpu\nARG TF_VERSION=2.3.1\n"
            "RUN pip install ${TF_PIP}==${TF_VERSION}\n",
            3,
        ),
        ("FROM python:3.8\nENV V 2.7\nRUN pip install tensorflow==$V.0\n", 7),  # the legacy `ENV name value`
        ('FROM python:3.8\nARG V="2.6.0"\nRUN pip install "tensorflow==${V}"\n', 6),  # quoted
        # A build argument without a default: its `:-` default is what a plain `docker build` installs.
        ("FROM python:3.8\nARG V\nRUN pip install tensorflow==${V:-2.9.0}\n", 9),
        # ENV after ARG: the later definition counts from its line on.
        ("FROM python:3.8\nARG V=2.1.0\nENV V=2.8.0\nRUN pip install tensorflow==$V\n", 8),
        # A global ARG (before FROM) declared again in the stage takes its default.
        ("ARG V=2.10.0\nFROM python:3.8\nARG V\nRUN pip install tensorflow==$V\n", 10),
        ("ARG TAG=2.11.0-gpu\nFROM tensorflow/tensorflow:${TAG}\n", 11),
    ],
)
def test_dockerfile_variables_are_expanded(project, dockerfile, expected):
    (project / "Dockerfile").write_text(dockerfile)
    t = resolve(project)
    assert t.releases == releases(expected) and t.tensorflow_source == DECLARED
    [declared] = [line for line in t.describe() if line.startswith("    Dockerfile:")]
    assert "$" in declared and "line" in declared  # --show-target says which variable gave what, from where


@pytest.mark.parametrize(
    "dockerfile",
    [
        "FROM python:3.8\nRUN V=2.7 && pip install tensorflow==$V\n",  # a variable of the shell: not guessed
        "ARG V=2.7.0\nFROM python:3.8\nRUN pip install tensorflow==$V\n",  # a global ARG: FROM lines only
        "FROM python:3.8\nARG V=2.7.0\nFROM python:3.9\nRUN pip install tensorflow==$V\n",  # another stage's
    ],
)
def test_dockerfile_variable_out_of_scope_says_nothing(project, dockerfile):
    """As in a real build, a variable not in scope is not what pip installs: the version is not guessed. TensorFlow
    is still declared, so it is any TF 2 (as for an image tag mpdoctor does not know), not the installed one."""
    (project / "Dockerfile").write_text(dockerfile)
    t = resolve(project)
    assert t.tensorflow_source == DECLARED and t.releases == releases(*range(22)) and not t.keras_certain
    assert any("$V not defined here" in line for line in t.describe())


@pytest.mark.parametrize(
    "requirement,expected",
    [
        ("tensorflow[and-cuda]==2.15.0.post1", releases(15)),
        ("tensorflow==2.15.0+cpu", releases(15)),
        ("tensorflow-cpu==2.15.0.post1+local.1", releases(15)),
        ("tensorflow>=2.12.0.post1,<2.14", releases(12, 13)),
        ("tensorflow==1.15.5-1", releases(15, major=1)),  # an implicit post release
        ("tensorflow==2.15.0rc1", releases(15)),  # a pre-release is still its release
    ],
)
def test_post_and_local_releases_are_their_release(project, requirement, expected):
    (project / "requirements.txt").write_text(requirement + "\n")
    t = resolve(project)
    assert t.releases == expected and t.tensorflow_source == DECLARED


def test_conflicting_declarations_are_judged_by_the_nearest_and_said(project):
    """The issue's case: requirements pin TF 2.5.1, the Dockerfile's image is TF 1.15. Not their union: one is
    judged against, and MP003 names both."""
    (project / "requirements.txt").write_text("tensorflow==2.5.1\n")
    (project / "Dockerfile").write_text("FROM tensorflow/tensorflow:1.15.5-gpu-py3\nRUN pip install pillow\n")
    t = resolve(project)
    assert t.releases == releases(5) and t.tensorflow_origin == "requirements.txt:1"
    [conflict] = t.conflicts
    assert conflict.declared and conflict.line is None
    assert "requirements.txt:1" in conflict.message and "Dockerfile:1" in conflict.message
    assert "judged against requirements.txt" in conflict.message
    assert any("(set aside: see the conflict)" in line and "Dockerfile:1" in line for line in t.describe())
    # The nearer file decides: a Dockerfile beside the code before requirements in a folder below.
    (project / "requirements.txt").unlink()
    (project / "requirements").mkdir()
    (project / "requirements" / "base.txt").write_text("tensorflow==2.5.1\n")
    t = resolve(project)
    assert t.releases == releases(15, major=1) and "judged against Dockerfile, the nearer" in t.conflicts[0].message


def test_declarations_that_overlap_or_are_alternatives_are_no_conflict(project):
    (project / "requirements.txt").write_text("tensorflow>=1.11\n")
    (project / "Dockerfile").write_text("FROM tensorflow/tensorflow:1.15.5-gpu-py3\n")
    t = resolve(project)
    assert t.releases == releases(15, major=1) and not t.conflicts  # both hold: 1.15
    (project / "Dockerfile").unlink()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[project.optional-dependencies]\n'
        'tf1 = ["tensorflow==1.15"]\ntf2 = ["tensorflow==2.5"]\n'
    )
    (project / "requirements.txt").unlink()
    t = resolve(project)
    assert t.releases == releases(15, major=1) | releases(5) and not t.conflicts  # extras: either line


def test_declaration_conflict_is_one_mp003_info_per_float16_file(project, capsys, monkeypatch):
    (project / "requirements.txt").write_text("tensorflow==2.5.1\n")
    (project / "Dockerfile").write_text("FROM tensorflow/tensorflow:1.15.5-gpu-py3\n")
    (project / "m.py").write_text(
        TF_KERAS.replace("\nmodel", "\ntf.keras.mixed_precision.set_global_policy('mixed_float16')\nmodel")
    )
    (project / "plain.py").write_text("import numpy as np\nx = np.zeros(3)\n")
    _, out, _ = run_cli(["check", "--no-trace", "--format", "json", "m.py", "plain.py"], project, capsys, monkeypatch)
    found = [(d["path"], d["code"], d["severity"]) for d in json.loads(out)["diagnostics"] if d["code"] == "MP003"]
    assert found == [("m.py", "MP003", "info")]


def test_dockerfile_pip_install_replaces_the_image_tensorflow(project):
    """`pip install tensorflow==2.8.0` on a TF 2.4 image installs 2.8 (not "2.4 or 2.8"); an unpinned or satisfied
    install keeps the image's."""
    (project / "Dockerfile").write_text("FROM tensorflow/tensorflow:2.4.0-gpu\nRUN pip install tensorflow==2.8.0\n")
    t = resolve(project)
    assert t.releases == releases(8) and t.tensorflow_origin == "Dockerfile:2" and not t.conflicts
    assert any("replaced by the pip install of line 2" in line for line in t.describe())
    (project / "Dockerfile").write_text(
        "FROM tensorflow/tensorflow:2.4.0-gpu\nRUN pip install tensorflow keras-tuner\n"
    )
    assert resolve(project).releases == releases(4)
