"""Reaching the model of a script as its user runs it (issue 31): the fixture project tests/fixtures/projects/entries/
(README there), each script's docstring saying what running it showed. A model built only under `if __name__ ==
"__main__":` is reached by running that block (stopped at the first training call), a script that needs
command-line arguments is an info naming them, and a script reading its data next to itself runs from there. The
ground truth runs each script as its user would; one `mpdoctor check --trace` over a copy of the project traces
every case at once."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "tests" / "fixtures" / "projects" / "entries"


def run_script(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """A script of the project run for real (`python ARGS...` from `cwd`)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="0", PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def project(tensorflow, tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("entries") / "entries"
    shutil.copytree(PROJECT, copy)
    (copy / ".git").mkdir()  # the project root, as a clone's
    return copy


@dataclass
class Checked:
    exit: int
    findings: dict[str, list[dict]]  # {path relative to the project: its findings}
    traces: dict[str, dict]  # {path: its trace summary}


@pytest.fixture(scope="module")
def checked(project) -> Checked:
    done = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--trace", "--no-cache", "--format", "json", "."],
        cwd=project,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT), TF_USE_LEGACY_KERAS="0"),
        timeout=900,
        check=False,
    )
    report = json.loads(done.stdout)
    findings: dict[str, list[dict]] = {}
    for finding in report["diagnostics"]:
        findings.setdefault(finding["path"], []).append(finding)
    return Checked(done.returncode, findings, {trace["path"]: trace for trace in report["traces"]})


# ------------------------------------------------------------------------------------------------ ground truth


def test_ground_truth_the_model_under_main_is_float16_and_a_bare_run_trains_and_writes(project, tmp_path):
    probe = run_script(project, "scripts/train_main.py", "--probe")
    assert json.loads(probe.stdout.strip().splitlines()[-1]) == {"output": "float16"}, probe.stderr[-2000:]
    copy = shutil.copytree(PROJECT, tmp_path / "entries")
    assert run_script(copy, "scripts/train_main.py").returncode == 0
    assert (copy / "scripts" / "trained.txt").exists()  # what the trace must not do: it stops before training


def test_ground_truth_scripts_that_need_arguments_fail_bare_and_build_with_them(project):
    needs_data = run_script(project, "scripts/needs_data.py")
    assert needs_data.returncode == 2 and "the following arguments are required: --data" in needs_data.stderr
    config_path = run_script(project, "scripts/config_path.py")
    assert config_path.returncode == 1 and "TypeError" in config_path.stderr
    needs_flag = run_script(project, "scripts/needs_flag.py")
    assert needs_flag.returncode == 1 and "Flag --dataset must have a value other than None" in needs_flag.stderr
    configured = run_script(project, "scripts/config_path.py", "--config", "scripts/config.json")
    assert json.loads(configured.stdout.strip().splitlines()[-1]) == {"units": 3}, configured.stderr[-2000:]


def test_ground_truth_data_read_after_the_model_fails_and_the_data_is_found_from_the_script_directory(project):
    after_model = run_script(project, "scripts/data_after_model.py")
    assert after_model.returncode == 1 and "FileNotFoundError" in after_model.stderr
    from_root = run_script(project, "tasks/forecast.py", "--probe")
    assert from_root.returncode == 1 and "series.csv not found" in from_root.stderr
    from_tasks = run_script(project / "tasks", "forecast.py", "--probe")
    assert json.loads(from_tasks.stdout.strip().splitlines()[-1]) == {"output": "float32"}, from_tasks.stderr[-2000:]


# ------------------------------------------------------------------------------------------------ the trace


def test_a_model_built_under_main_is_reached_and_nothing_trains(checked, project):
    [finding] = checked.findings["scripts/train_main.py"]
    assert (finding["code"], finding["line"], finding["severity"]) == ("MP401", 18, "error")
    trace = checked.traces["scripts/train_main.py"]
    assert [model["name"] for model in trace["models"]] == ["functional"]
    assert trace["entry_run"]["as_main"] is True
    assert trace["entry_run"]["stopped_at_training"] == 34  # `model.fit(...)`: stopped there
    assert not (project / "scripts" / "trained.txt").exists()


@pytest.mark.parametrize(
    ("path", "argument"),
    [
        ("scripts/needs_data.py", "--data"),
        ("scripts/config_path.py", "--config"),
        ("scripts/needs_flag.py", "--dataset"),
    ],
)
def test_a_script_that_needs_command_line_arguments_is_one_info_naming_them(checked, path, argument):
    [finding] = checked.findings[path]
    assert (finding["code"], finding["severity"]) == ("MP003", "info")
    assert finding["message"].startswith(f"cannot trace: needs command-line arguments ({argument})")
    assert checked.traces[path]["entry_run"]["needs_arguments"] == [argument]


def test_a_data_read_failing_after_the_model_exists_keeps_the_model_and_is_no_error(checked):
    [finding] = checked.findings["scripts/data_after_model.py"]
    assert (finding["code"], finding["severity"], finding["line"]) == ("MP003", "info", 16)
    assert "FileNotFoundError" in finding["message"] and "the 1 model(s) built before it" in finding["message"]
    assert [model["name"] for model in checked.traces["scripts/data_after_model.py"]["models"]] == ["functional"]


def test_a_script_reading_data_next_to_itself_runs_from_its_directory_and_says_so(checked):
    assert "tasks/forecast.py" not in checked.findings
    trace = checked.traces["tasks/forecast.py"]
    assert [model["name"] for model in trace["models"]] == ["sequential"]
    assert trace["entry_run"]["cwd"] == "tasks" and trace["entry_run"]["stopped_at_training"] == 27


def test_the_only_error_is_the_real_float16_head(checked):
    errors = [(path, f["code"]) for path, found in checked.findings.items() for f in found if f["severity"] == "error"]
    assert errors == [("scripts/train_main.py", "MP401")]
    assert checked.exit == 1


def test_an_imported_model_or_builder_keeps_main_from_running(tmp_path, tensorflow):
    """The `__main__` block runs only when importing built nothing and no zero-argument builder exists."""
    from mpdoctor.trace.runner import run_trace

    canary = tmp_path / "ran.txt"
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(f"""\
        import keras

        def build_model():
            inputs = keras.Input((4,))
            return keras.Model(inputs, keras.layers.Dense(2)(inputs))

        if __name__ == "__main__":
            open({str(canary)!r}, "w").write("ran")
        """)
    )
    outcome = run_trace(str(script), timeout=300)
    assert outcome.facts is not None and [m.name for m in outcome.facts.models] == ["functional"]
    assert not canary.exists() and not outcome.facts.entry_run


def test_a_main_block_of_a_script_using_neither_keras_nor_the_project_is_not_run(tmp_path, tensorflow):
    from mpdoctor.trace.runner import run_trace

    canary = tmp_path / "downloaded.txt"
    script = tmp_path / "download.py"
    script.write_text(f'import json\n\nif __name__ == "__main__":\n    open({str(canary)!r}, "w").write("x")\n')
    outcome = run_trace(str(script), timeout=300)
    assert outcome.facts is not None and outcome.facts.exception is None
    assert not canary.exists()


# ------------------------------------------------------------------------------------------------ without TensorFlow


def test_main_blocks_are_the_top_level_ifs_testing_name_against_main():
    from mpdoctor.trace.child.main_run import main_blocks

    tree = ast.parse(
        textwrap.dedent("""\
        if __name__ == "__main__" and __package__ is None:
            pass
        if "__main__" == __name__:
            pass
        if __name__ != "x":
            pass
        def f():
            if __name__ == "__main__":
                pass
        """)
    )
    assert [block.lineno for block in main_blocks(tree)] == [1, 3]


def test_the_script_directory_is_chosen_only_for_a_relative_path_missing_here_and_present_there(tmp_path, monkeypatch):
    from mpdoctor.trace.child.main_run import data_directory

    script = tmp_path / "tasks" / "forecast.py"
    script.parent.mkdir()
    (script.parent / "series.csv").write_text("1\n")
    monkeypatch.chdir(tmp_path)
    source = 'import numpy\nseries = numpy.loadtxt("series.csv")\nprint("a sentence.")\n'
    assert data_directory(ast.parse(source), str(script)) == str(script.parent)
    (tmp_path / "series.csv").write_text("1\n")  # found from here too: nothing to change
    assert data_directory(ast.parse(source), str(script)) is None
    assert data_directory(ast.parse('open("other.csv")\n'), str(script)) is None


def test_argparse_required_messages_name_the_arguments():
    from mpdoctor.trace.child.main_run import _required_names

    assert _required_names("the following arguments are required: --config, -o") == ["--config", "-o"]
    assert _required_names("one of the arguments --train --eval is required") == ["--train", "--eval"]
    assert _required_names("argument --lr: invalid float value: 'x'") == []


def test_a_custom_training_loop_under_main_stops_at_its_first_gradient_application(tmp_path, tensorflow):
    from mpdoctor.trace.runner import run_trace

    canary = tmp_path / "stepped.txt"
    script = tmp_path / "loop.py"
    script.write_text(
        textwrap.dedent(f"""\
        import keras
        import tensorflow as tf

        def make(width):
            inputs = keras.Input((4,))
            return keras.Model(inputs, keras.layers.Dense(width)(inputs))

        if __name__ == "__main__":
            model = make(2)
            optimizer = keras.optimizers.SGD()
            for step in range(3):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(model(tf.ones((2, 4))))
                weights = model.trainable_variables
                optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))
                open({str(canary)!r}, "a").write("step")
        """)
    )
    outcome = run_trace(str(script), timeout=300)
    assert outcome.facts is not None and [m.name for m in outcome.facts.models] == ["functional"]
    assert outcome.facts.entry_run.stopped_at_training == 15 and not canary.exists()
