"""--stub-missing (issue 31): stand-ins for the missing non-ML modules the project's code imports, so that the model
is still built where pandas, wandb or tqdm are absent. The fixture project tests/data/stub_missing/ imports modules
surely not installed anywhere and real ones hidden by its own meta-path blocker (hide_installed.py); each file's
docstring says what running it showed. The stand-ins themselves and the finder's decisions are tested without
TensorFlow."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mpdoctor.config import ConfigError, load_config
from mpdoctor.trace.child.stand_ins import StandIn, StandInFinder, never_stood_in, stand_in_class

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "data" / "stub_missing"
NOTE = "traced with stand-ins for: "

# ------------------------------------------------------------------------------------------ the stand-ins


def test_a_stand_in_lets_module_level_code_run():
    pd = StandIn("pandas")
    frame = pd.read_csv("data.csv").dropna()
    assert list(frame) == [] and len(frame) == 0 and not frame
    assert "mpdoctor stand-in for pandas.read_csv().dropna()" in repr(frame)
    with pd.option_context("display.max_rows", 5) as context:
        assert isinstance(context, StandIn)
    assert isinstance(frame["x"] + 1, StandIn) and isinstance(2 * frame.shape[0], StandIn)
    frame["y"] = 3  # ignored
    assert "y" not in frame
    assert not isinstance(frame, pd.DataFrame) and not issubclass(int, pd.DataFrame)


def test_a_stand_in_decorates_and_is_subclassed():
    wandb = StandIn("wandb")

    def train():
        return "trained"

    assert wandb.watch(train) is train  # a decorator returns what it decorates
    assert wandb.main(config_path="conf")(train) is train  # a decorator factory too

    class Logger(wandb.keras.WandbCallback):
        def on_epoch_end(self):
            return self.log({"epoch": 1})

    logger = Logger(save_model=False)
    assert isinstance(logger.on_epoch_end(), StandIn)
    assert stand_in_class("wandb.keras.WandbCallback") in Logger.__mro__


def test_private_and_dunder_attributes_are_missing():
    """Protocols probed with hasattr (numpy's __array__, Keras's private markers) see a plain object."""
    thing = StandIn("tqdm")
    assert not hasattr(thing, "__array__") and not hasattr(thing, "_keras_mask")
    base = stand_in_class("lightning.LightningModule")()
    assert not hasattr(base, "_is_layer") and isinstance(base.log, StandIn)


@pytest.mark.parametrize(
    "name",
    [
        "tensorflow",
        "tensorflow_hub",
        "tensorflow_addons",
        "tf_keras",
        "keras",
        "keras_hub",
        "keras_tuner",
        "numpy",
        "jax",
        "torch",
        "torchvision",
        "transformers",
        "os",
    ],
)
def test_ml_frameworks_and_the_standard_library_never_get_stand_ins(name):
    assert never_stood_in(name)


@pytest.mark.parametrize(
    "name", ["pandas", "wandb", "tqdm", "albumentations", "cv2", "sklearn", "hydra", "PIL", "scipy", "tensorboard"]
)
def test_other_modules_may_get_stand_ins(name):
    assert not never_stood_in(name)


MISSING = "mpdoctor_surely_missing_module"


@pytest.fixture
def finder(tmp_path):
    """A finder for which tmp_path holds the user's code; removed from sys.meta_path afterwards."""
    user = str(tmp_path) + os.sep
    made = StandInFinder(lambda path: path.startswith(user), lambda top: top == "own_package")
    sys.meta_path.append(made)
    yield made
    sys.meta_path.remove(made)
    for name in [n for n in sys.modules if n.split(".")[0] in (MISSING, "own_package")]:
        del sys.modules[name]


def run_user_code(tmp_path: Path, text: str) -> dict:
    file = tmp_path / "user_code.py"
    file.write_text(text)
    namespace: dict = {}
    exec(compile(text, str(file), "exec"), namespace)  # a frame of the user's file imports
    return namespace


def test_the_users_imports_of_missing_modules_get_stand_ins(finder, tmp_path):
    namespace = run_user_code(tmp_path, f"import {MISSING}.sub.deeper as deep\nfrom {MISSING} import thing\n")
    assert isinstance(namespace["thing"], StandIn)
    assert sys.modules[f"{MISSING}.sub.deeper"] is namespace["deep"]
    assert finder.used == [MISSING]


def test_an_import_outside_the_users_code_keeps_its_import_error(finder):
    """A library probing an optional dependency (Keras and pandas, say) must not be handed a stand-in."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(MISSING)
    assert finder.used == []


def test_an_import_whose_absence_the_code_handles_gets_no_stand_in(finder, tmp_path):
    namespace = run_user_code(tmp_path, f"try:\n    import {MISSING}\nexcept ImportError:\n    {MISSING} = None\n")
    assert namespace[MISSING] is None and finder.used == []


def test_the_projects_own_modules_never_get_stand_ins(finder, tmp_path):
    with pytest.raises(ModuleNotFoundError):
        run_user_code(tmp_path, "import own_package\n")
    assert finder.used == []


def test_stub_missing_is_a_configuration_key(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.mpdoctor]\nstub-missing = true\n")
    assert load_config(tmp_path).stub_missing is True
    (tmp_path / "pyproject.toml").write_text("[tool.mpdoctor]\nstub-missing = 1\n")
    with pytest.raises(ConfigError, match="stub-missing: expected true or false"):
        load_config(tmp_path)


def _run_on_stand_ins(exception: dict) -> list:
    """The parent's reading of a run that raised `exception` after stand-ins for pandas were given."""
    from mpdoctor.config import Config
    from mpdoctor.facts.schema import Facts
    from mpdoctor.trace.checks import diagnose
    from mpdoctor.trace_context import TraceContext

    facts = Facts.from_json({"status": "exception", "exception": {**exception, "phase": "import"}})
    facts.stand_ins = ["pandas"]
    return diagnose(facts, None, "", TraceContext("m.py", "m.py", "", None), Config())


def test_a_failure_that_may_come_from_stand_ins_is_an_info_saying_possibly():
    [info] = _run_on_stand_ins({"type": "IndexError", "message": "list index out of range"})
    assert (info.code, info.severity.value) == ("MP003", "info")
    assert "IndexError: list index out of range, possibly caused by the stand-ins for `pandas`" in info.message


def test_a_failure_no_stand_in_can_cause_stays_mp001_and_says_stand_ins_were_used():
    [error] = _run_on_stand_ins({"type": "SyntaxError", "message": "invalid syntax (m.py, line 3)"})
    assert (error.code, error.severity.value) == ("MP001", "error")
    assert error.message.endswith("(traced with stand-ins for: pandas)")


# ------------------------------------------------------------------------------------------ traced for real


def check_fixture(project: Path, *options: str) -> dict[str, list[dict]]:
    """{file: its findings}, and under "traces" {file: [its trace summary]}."""
    result = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--no-cache", "--format", "json", *options, "."],
        cwd=project,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=900,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    found: dict[str, list[dict]] = {"traces": report["traces"]}
    for diagnostic in report["diagnostics"]:
        found.setdefault(diagnostic["path"], []).append(diagnostic)
    return found


@pytest.fixture(scope="module")
def project(tensorflow, tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("stub") / "stub_missing"
    shutil.copytree(FIXTURE, copy)
    return copy


@pytest.fixture(scope="module")
def without(project) -> dict[str, list[dict]]:
    return check_fixture(project)


@pytest.fixture(scope="module")
def stubbed(project) -> dict[str, list[dict]]:
    return check_fixture(project, "--stub-missing")


def traced(findings: list[dict], code: str) -> list[dict]:
    return [d for d in findings if d["code"] == code and "trace" in d["passes"]]


@pytest.mark.parametrize("file", ["train_keras3.py", "train_keras2.py"])
def test_without_stand_ins_the_run_stops_at_the_first_missing_module(without, file):
    [info] = [d for d in without[file] if d["code"] == "MP003"]
    assert info["severity"] == "info" and info["message"].startswith("not traced: `mpdoctor_fixture_")
    assert info["line"] == {"train_keras3.py": 9, "train_keras2.py": 8}[file]
    assert not traced(without[file], "MP401")  # the static MP401 only: the model was never built


@pytest.mark.parametrize(
    ("file", "names"),
    [
        ("train_keras3.py", "mpdoctor_fixture_tracker, mpdoctor_fixture_frames, yaml, tqdm"),
        ("train_keras2.py", "mpdoctor_fixture_frames, mpdoctor_fixture_tracker, tqdm"),
    ],
)
def test_with_stand_ins_the_model_is_built_and_its_findings_say_so(stubbed, file, names):
    assert [d["code"] for d in stubbed[file]] == ["MP401"]
    [finding] = traced(stubbed[file], "MP401")
    assert finding["message"].endswith(f"({NOTE}{names})")
    assert NOTE + names in finding["notes"]
    [summary] = [t for t in stubbed["traces"] if t["path"] == file]
    assert ", ".join(summary["stand_ins"]) == names and summary["models"]


def test_a_run_without_stand_ins_lists_none(without, stubbed):
    assert not [t for t in without["traces"] if "stand_ins" in t]
    assert "stand_ins" not in next(t for t in stubbed["traces"] if t["path"] == "guarded.py")


def test_a_handled_import_gets_no_stand_in(stubbed):
    [finding] = stubbed["guarded.py"]
    assert finding["code"] == "MP401" and "trace" in finding["passes"]
    assert NOTE not in finding["message"]


def test_a_failure_a_stand_in_caused_is_an_info_not_the_users_bug(without, stubbed):
    [info] = stubbed["data_shape.py"]
    assert (info["code"], info["severity"], info["line"]) == ("MP003", "info", 9)
    assert "caused by the stand-ins for `mpdoctor_fixture_frames`" in info["message"]
    assert "possibly" not in info["message"]
    assert [d["message"][:12] for d in without["data_shape.py"]] == ["not traced: "]


def test_an_ml_framework_gets_no_stand_in(stubbed):
    [info] = stubbed["needs_torch.py"]
    assert info["line"] == 5
    assert info["message"].startswith("not traced: `torch` is not installed here")


def test_a_missing_module_of_the_project_itself_stays_an_error(stubbed):
    [error] = stubbed["own_missing.py"]
    assert (error["code"], error["severity"], error["line"]) == ("MP001", "error", 6)
    assert "No module named 'helpers.metrics'" in error["message"]
    assert error["message"].endswith(f"({NOTE}mpdoctor_fixture_tracker)")


def test_the_projects_own_names_are_what_the_child_never_stands_in_for():
    from mpdoctor.project.layout import layout_of, own_top_levels

    file = str(FIXTURE / "own_missing.py")
    names = own_top_levels(layout_of(file), file)
    assert {"helpers", "hide_installed", "train_keras3"} <= set(names)
    assert "mpdoctor_fixture_frames" not in names
