"""Projects, not files (issue 21): the dtype policy an entry point sets reaches the modules that build the model.

The fixture projects live in tests/fixtures/projects/ (README there); lines marked `# expect: MP401` / `MP403` must
be reported when the whole project is checked, and nowhere else. The tests that run TensorFlow show the ground
truth: each entry point, run with its low-precision option, breaks the head the static pass reports.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from mpdoctor.config import Config
from mpdoctor.engine import check_paths
from mpdoctor.facts.trace_request import NumericsRequest
from mpdoctor.project import discovery

PROJECTS = Path(__file__).parent / "fixtures" / "projects"
NAMES = ("two_files", "flag_choices", "registry", "unreached", "keras_spellings", "two_entries", "policy_helpers")
CODES = {"MP401", "MP403"}
_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>MP\d{3}(?:\s*,\s*MP\d{3})*)")


def expected(project: Path) -> set[tuple[str, int, str]]:
    """(path, line, code) of the markers; a notebook's path carries the cell: `nb.ipynb cell 3`."""
    from mpdoctor.notebook import read_notebook

    found = set()
    for path in sorted([*project.rglob("*.py"), *project.rglob("*.ipynb")]):
        lines = path.read_text().splitlines()
        cells = [(None, n) for n in range(1, len(lines) + 1)]
        if path.suffix == ".ipynb":
            notebook = read_notebook(path)
            lines, cells = notebook.source.splitlines(), list(notebook.line_map)
        for (cell, number), line in zip(cells, lines, strict=False):
            if m := _EXPECT.search(line):
                where = path.relative_to(project).as_posix() + (f" cell {cell}" if cell is not None else "")
                found |= {(where, number, c.strip()) for c in m["codes"].split(",")}
    return found


def reported(project: Path, report) -> set[tuple[str, int, str]]:
    return {
        (
            Path(d.location.path).resolve().relative_to(project.resolve()).as_posix()
            + (f" cell {d.location.cell}" if d.location.cell is not None else ""),
            d.location.line,
            d.code,
        )
        for d in report.diagnostics
        if d.code in CODES
    }


def check(*paths: Path, **config):
    cfg = Config()
    for key, value in config.items():
        setattr(cfg, key, value)
    report = check_paths(list(paths), cfg)
    assert not report.errors, [e.render() for e in report.errors]
    return report


@pytest.mark.parametrize("legacy", ["0", "1"], ids=["keras3-env", "tf_keras-env"])
@pytest.mark.parametrize("name", NAMES)
def test_fixture_project_findings_match_the_markers(name, legacy, monkeypatch):
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", legacy)
    project = PROJECTS / name
    assert reported(project, check(project)) == expected(project)


def test_each_library_file_checked_alone_gets_its_projects_contexts():
    """`mpdoctor check models/net.py` (a pre-commit hook passes single files) finds the same as the directory run."""
    project = PROJECTS / "two_files"
    report = check(project / "models" / "net.py")
    assert reported(project, report) == expected(project)


def test_the_message_names_the_context_once_and_the_json_carries_its_path():
    """Once, and in one parenthetical: inside the one that names the policy already (issue 33)."""
    project = PROJECTS / "two_files"
    [d] = [d for d in check(project).diagnostics if d.code == "MP401"]
    assert d.message.count("train.py:20") == 1 and d.message.endswith('set dtype="float32" on this layer'), d.message
    assert re.search(r'\(policy "mixed_float16", set in \S*train\.py:20 when --amp is given\)', d.message), d.message
    assert d.context.policy == "mixed_float16"
    assert d.context.set_at.endswith("two_files/train.py:20")
    assert d.context.condition == "when --amp is given"
    assert [step.rsplit("/", 1)[-1] for step in d.context.path] == [
        "train.py:20 set_global_policy('mixed_float16') in main()",
        "train.py:21 build_classifier()",
    ]
    from mpdoctor.report.json_format import diagnostic_to_dict

    as_json = diagnostic_to_dict(d)
    assert as_json["context"]["condition"] == "when --amp is given" and len(as_json["context"]["path"]) == 2
    # a finding that the file has on its own carries no context (and no "context" key in the JSON)
    alone = check(PROJECTS / "registry" / "models" / "legacy.py", assume_policy="mixed_float16")
    assert alone.diagnostics and all(x.context is None for x in alone.diagnostics)
    assert "context" not in diagnostic_to_dict(alone.diagnostics[0])


def test_a_policy_set_where_the_model_module_is_never_reached_invents_nothing():
    project = PROJECTS / "unreached"
    report = check(project)
    assert not [d for d in report.diagnostics if d.location.path.endswith("models/net.py")]


def test_tests_are_entry_points_only_when_tests_are_checked():
    project = PROJECTS / "unreached"
    report = check(project / "tests", project / "models")
    assert ("models/net.py", 7, "MP401") in reported(project, report)
    [d] = [d for d in report.diagnostics if d.code == "MP401"]
    assert "tests/mixed_precision_check.py:10" in d.message


def test_a_file_outside_any_project_is_checked_alone(tmp_path):
    """No pyproject.toml, setup.cfg, setup.py or .git above a named file: per-file behaviour, said with --verbose."""
    target = tmp_path / "net.py"
    shutil.copy(PROJECTS / "two_files" / "models" / "net.py", target)
    report = check(target)
    assert not [d for d in report.diagnostics if d.code == "MP401"]
    assert any("not inside a project" in note for note in report.notes)


def write_project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


HEAD = """
    from tensorflow import keras


    def build():
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    """


def mp401_files(report) -> list[str]:
    return sorted(Path(d.location.path).name for d in report.diagnostics if d.code == "MP401")


@pytest.mark.parametrize(
    "train, policy",
    [
        # a variable from a conditional expression on a flag
        (
            """
            import argparse
            from tensorflow import keras
            from net import build

            parser = argparse.ArgumentParser()
            parser.add_argument("--fp16", action="store_true")
            args = parser.parse_args()
            policy = "mixed_float16" if args.fp16 else "float32"
            keras.mixed_precision.set_global_policy(policy)
            model = build()
            """,
            "mixed_float16",
        ),
        # set in a helper of another module, which returns before the model is built
        (
            """
            from amp import enable_mixed_precision
            from net import build

            def main():
                enable_mixed_precision("bf16")
                return build()

            if __name__ == "__main__":
                main()
            """,
            "mixed_bfloat16",
        ),
        # an absl string flag whose default is a policy; app.run(main)
        (
            """
            from absl import app, flags
            import tensorflow as tf
            from net import build

            flags.DEFINE_string("policy", "mixed_float16", "dtype policy")
            FLAGS = flags.FLAGS

            def main(_):
                tf.keras.mixed_precision.set_global_policy(tf.keras.mixed_precision.Policy(FLAGS.policy))
                build()

            if __name__ == "__main__":
                app.run(main)
            """,
            "mixed_float16",
        ),
        # a dict from a flag to policies; a package import of the builder module
        (
            """
            import argparse
            from tensorflow import keras
            import net as models

            POLICIES = {"fp16": "mixed_float16", "fp32": "float32"}

            def main():
                parser = argparse.ArgumentParser()
                parser.add_argument("--precision", default="fp32")
                args = parser.parse_args()
                keras.mixed_precision.set_global_policy(POLICIES[args.precision])
                models.build()

            main()
            """,
            "mixed_float16",
        ),
        # the policy is set before the builder module is imported: its module-level model is built under it
        (
            """
            from tensorflow import keras
            keras.mixed_precision.set_global_policy("mixed_float16")
            import headless
            """,
            "mixed_float16",
        ),
    ],
    ids=["ifexp-flag", "helper-sets-policy", "absl-default", "dict-of-policies", "import-after-set"],
)
def test_policy_values_are_followed(tmp_path, train, policy):
    project = write_project(
        tmp_path,
        {
            "train.py": train,
            "net.py": HEAD,
            "headless.py": """
                from tensorflow import keras

                MODEL = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
                """,
            "amp.py": """
                from tensorflow import keras

                def enable_mixed_precision(kind):
                    if kind == "bf16":
                        keras.mixed_precision.set_global_policy("mixed_bfloat16")
                """,
        },
    )
    report = check(project)
    [d] = [d for d in report.diagnostics if d.code == "MP401"]
    assert d.context is not None and d.context.policy == policy, d.message


def test_a_policy_whose_value_cannot_be_known_is_not_a_low_precision_one(tmp_path):
    project = write_project(
        tmp_path,
        {
            "train.py": """
                import yaml
                from tensorflow import keras
                from net import build

                config = yaml.safe_load(open("config.yaml"))
                keras.mixed_precision.set_global_policy(config["policy"])
                build()
                """,
            "net.py": HEAD,
        },
    )
    assert mp401_files(check(project)) == []
    from mpdoctor.cli.check import show_contexts

    out = io.StringIO()
    show_contexts([project], Config(), stream=out)
    assert "unknown" in out.getvalue() and "set_global_policy(config['policy'])" in out.getvalue()


def test_a_factory_resolved_at_run_time_falls_back_to_the_file_and_says_so(tmp_path):
    project = write_project(
        tmp_path,
        {
            "train.py": """
                import sys
                from tensorflow import keras
                import zoo

                keras.mixed_precision.set_global_policy("mixed_float16")
                model = getattr(zoo, sys.argv[1])()
                """,
            "zoo.py": HEAD,
        },
    )
    report = check(project)
    assert mp401_files(report) == []
    assert any("train.py:7: `getattr(zoo, sys.argv[1])()` is resolved at run time" in n for n in report.notes)


IMPORT_TEXTS = [
    "from a import (\n    b,\n    import_c,\n)\nimport d",
    "x = 'import y'\nimport z; import w",
    "from . import (x,\nimport y)\nimport q",
    "  import a as b, c\n",
    "from x import y  # import z\nimport w",
    "importlib = 1\nimport x",
    "from a import b\rimport c\n",  # a lone CR starts no line for the scan (nor for `^`)
    "from a import (b\nimport c\n",  # unclosed: each line on its own
    "from a import (b,\nimport c) import d\n",  # the line of `import d` starts inside the statement before
    "def f():\n    from .models import net_0 as net\n    import json, os.path\n",
    "",
    "import",
]


@pytest.mark.parametrize(
    "text", IMPORT_TEXTS + [p.read_text() for p in sorted(Path(discovery.__file__).parent.glob("*.py"))]
)
def test_the_import_scan_finds_what_the_regular_expression_finds_anywhere(text):
    """The scan tries _IMPORT only where a line holds "import": the same matches as trying it at every line."""
    expected = [(m.span(), m.groups()) for m in discovery._IMPORT.finditer(text)]
    assert [(m.span(), m.groups()) for m in discovery._import_statements(text)] == expected


def test_recursion_and_cycles_between_modules_terminate(tmp_path):
    project = write_project(
        tmp_path,
        {
            "a.py": """
                from tensorflow import keras
                import b

                def ping(n):
                    return b.pong(n - 1) if n else b.build()

                keras.mixed_precision.set_global_policy("mixed_float16")
                ping(3)
                """,
            "b.py": """
                import a
                from tensorflow import keras

                def pong(n):
                    return a.ping(n)

                def build():
                    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
                """,
        },
    )
    assert mp401_files(check(project)) == ["b.py"]


def test_cli_show_contexts_and_verbose(capsys):
    from mpdoctor.cli import main

    project = PROJECTS / "registry"
    assert main(["check", "--show-contexts", str(project)]) == 0
    out = capsys.readouterr().out
    assert "models/cnn.py:4 build_cnn (called from another module)" in out
    assert "mixed_float16  set in" in out and "when --fp16 is given" in out
    assert "MODELS[args.model]()" in out
    assert "legacy" not in out  # never reached
    code = main(["check", "--no-trace", "-v", "--select", "MP401", str(project)])
    captured = capsys.readouterr()
    assert code == 1 and "1 entry point(s) that set a policy" in captured.err


def test_show_contexts_follows_callbacks_policy_helpers_and_side_effect_imports(capsys):
    """Issue 31: a policy set in a function a project driver calls back, by the package's own helper (from a config
    value, past its `if precision is None:` branches), and at import of a module a notebook imports; not through a
    function handed over but never called, a helper never called, nor a helper that sets float32."""
    from mpdoctor.cli import main

    assert main(["check", "--show-contexts", str(PROJECTS / "policy_helpers")]) == 0
    out = capsys.readouterr().out
    builders: dict[str, list[str]] = {}
    for line in out.splitlines():
        if not line.startswith(" "):
            builders[line.split()[1]] = []
        else:
            policy, _, rest = line.strip().partition("  ")
            origin = re.sub(r"\S*/", "", rest.strip().split(":", 1)[0])  # `set in callback.py`
            builders[list(builders)[-1]].append(f"{policy} {origin}")
    assert builders == {
        "build_callback": ["mixed_float16 set in callback.py"],
        "load": ["mixed_bfloat16 set in precision.py"],
        "load_float32": ["float32 set in precision.py"],
        "build_side": ["mixed_float16 set in amp.py"],
    }
    assert "side_effect.ipynb cell 3:1 models.build_side()" in out
    assert " when " not in out  # config["precision"] is one item, not a condition on its key
    # a route that starts in the helper says which entry point it comes from
    assert re.search(r"set in \S*pkg/precision\.py:14 \(entry point \S*helper\.py\): ", out)


def test_fix_keeps_the_project_context(tmp_path):
    project = shutil.copytree(PROJECTS / "two_files", tmp_path / "two_files")
    from mpdoctor.cli import main

    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        main(["check", "--no-trace", "--diff", "--select", "MP401", str(project)])
    assert '+    outputs = keras.layers.Dense(num_classes, activation="softmax", kernel_initializer="ones", dtype=' in (
        out.getvalue()
    )


# ------------------------------------------------------------------------------------------------ ground truth

tf_needed = pytest.mark.usefixtures("tensorflow")


def run_entry(project: Path, *args: str, legacy: bool = False) -> list:
    """Run an entry point of a fixture project for real (as `python train.py ...` from its directory) and return
    what its --probe printed."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONDONTWRITEBYTECODE="1")
    env["TF_USE_LEGACY_KERAS"] = "1" if legacy else "0"
    result = subprocess.run(
        [sys.executable, *args, "--probe"], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1].replace("nan", "NaN"))


def has_nan(values) -> bool:
    return any(v != v for row in values for v in row)


@tf_needed
def test_ground_truth_two_files_breaks_only_with_amp_and_the_fix_repairs_it(tmp_path):
    project = PROJECTS / "two_files"
    assert has_nan(run_entry(project, "train.py", "--amp"))
    assert not has_nan(run_entry(project, "train.py"))
    fixed = shutil.copytree(project, tmp_path / "two_files")
    from mpdoctor.cli import main

    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        main(["check", "--no-trace", "--fix", "--select", "MP401", str(fixed)])
    assert 'dtype="float32"' in (fixed / "models" / "net.py").read_text()
    assert not has_nan(run_entry(fixed, "train.py", "--amp"))


@tf_needed
def test_ground_truth_flag_choices_and_registry_break_in_float16():
    assert has_nan(run_entry(PROJECTS / "flag_choices", "train.py", "--dtype=mixed_float16"))
    assert not has_nan(run_entry(PROJECTS / "flag_choices", "train.py", "--dtype=float32"))
    for model in ("mlp", "cnn"):
        assert has_nan(run_entry(PROJECTS / "registry", "train.py", "--model", model, "--fp16"))
    assert not has_nan(run_entry(PROJECTS / "registry", "train.py", "--model", "cnn"))
    assert not has_nan(run_entry(PROJECTS / "unreached", "train.py"))


@tf_needed
def test_ground_truth_keras_spellings():
    project = PROJECTS / "keras_spellings"
    assert has_nan(run_entry(project, "train_keras3.py", "--amp"))
    assert [row[0] for row in run_entry(project, "train_keras2.py", "--fp16", legacy=True)] == [1.0, 1.0]
    assert all(row[0] < 1.0 for row in run_entry(project, "train_keras2.py", legacy=True))


@tf_needed
def test_ground_truth_two_entries_each_builder_is_float16_only_from_its_own_entry_points():
    project = PROJECTS / "two_entries"
    assert run_entry(project, "train_onset.py", "--amp") == {
        "build_reference": "float32",
        "build_onset": "float16",
        "build_shared": "float16",
    }
    assert run_entry(project, "train_arrow.py", "--amp") == {"build_arrow": "float16", "build_shared": "float16"}
    assert run_entry(project, "train_tpu.py") == {"build_shared": "bfloat16"}


@tf_needed
def test_ground_truth_policy_helpers():
    project = PROJECTS / "policy_helpers"
    assert run_entry(project, "callback.py") == {"build_callback": "float16"}
    assert run_entry(project, "helper.py") == {"load_float32": "float32", "load": "bfloat16"}
    from mpdoctor.notebook import read_notebook

    cells = read_notebook(project / "side_effect.ipynb").source  # the notebook's code cells, in order
    assert run_entry(project, "-c", cells) == {"build_side": "float16", "head": "float16"}
    assert run_entry(project, "late_import.py") == {"early": "float32"}


# ------------------------------------------------------------------------------------------------ the trace


def traced(path: Path, legacy: bool):
    from mpdoctor.engine import TraceOptions

    previous = os.environ.get("TF_USE_LEGACY_KERAS")
    os.environ["TF_USE_LEGACY_KERAS"] = "1" if legacy else "0"
    try:
        report = check_paths(
            [path], Config(), TraceOptions(enabled=True, timeout=300, numerics=NumericsRequest(enabled=False))
        )
    finally:
        if previous is None:
            os.environ.pop("TF_USE_LEGACY_KERAS", None)
        else:
            os.environ["TF_USE_LEGACY_KERAS"] = previous
    assert not report.errors, [e.render() for e in report.errors]
    return report


@tf_needed
@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_trace_builds_the_library_builder_under_the_entry_points_policy(legacy):
    project = PROJECTS / "two_files"
    report = traced(project / "models" / "net.py", legacy)
    [d] = [d for d in report.diagnostics if d.code == "MP401"]
    assert (d.location.line, d.passes) == (10, ("static", "trace"))
    assert "float16" in d.message and "when --amp is given" in d.message
    assert d.context is not None and d.context.condition == "when --amp is given"
    [summary] = report.traces
    assert summary.environment.global_policy == "mixed_float16"


@tf_needed
def test_trace_of_a_tf_keras_library_module():
    report = traced(PROJECTS / "keras_spellings" / "nets" / "keras2_net.py", legacy=False)
    [d] = [d for d in report.diagnostics if d.code == "MP401"]
    assert d.passes == ("static", "trace") and "sigmoid" in d.message and "train_keras2.py:24" in d.message


# ------------------------------------------------------------------------------------------------ real projects

REAL = Path(__file__).parent / "data" / "projects"


@pytest.mark.parametrize(
    "name, builder, policy, set_at, condition",
    [
        ("nvidia-dle-unet-medical", "model/unet.py:9 Unet", "mixed_float16", "main.py:15", "when --use_amp is given"),
        (
            "nvidia-dle-wide-and-deep",
            "trainer/model/widedeep.py:7 wide_deep_model",
            "mixed_float16",
            "trainer/utils/setup.py:9",
            "when --amp is given",
        ),
        (
            "google-automl-efficientdet",
            "efficientdet/tf2/train_lib.py:5 EfficientDetNetTrain",
            "mixed_bfloat16",
            "efficientdet/tf2/train.py:24",
            "when `mixed_precision` and `strategy == 'tpu'` and as get_precision() returns it",
        ),
        (
            "tf-models-resnet",
            "official/legacy/image_classification/resnet/resnet_model.py:8 resnet50",
            "mixed_float16",
            "official/modeling/performance.py:10",
            "when --dtype fp16 is given",
        ),
    ],
)
def test_real_projects_builders_get_the_policy_context_of_their_entry_point(name, builder, policy, set_at, condition):
    from mpdoctor.engine import analyse_projects, collect_files

    root = REAL / name
    files, _, _ = collect_files([root], Config())
    projects = analyse_projects([root], files, Config())
    found = {
        f"{Path(b.shown).resolve().relative_to(root.resolve()).as_posix()}:{b.line} {b.qualname}": b
        for b in projects.builders
    }
    assert builder in found, sorted(found)
    contexts = {(c.policy, c.origin and c.origin.line, c.condition) for c in found[builder].contexts}
    assert (policy, int(set_at.rsplit(":", 1)[1]), condition) in contexts, contexts
    assert found[builder].across_modules


def test_a_real_project_with_a_dynamic_model_import_falls_back_and_says_so():
    report = check(REAL / "nvidia-dle-convnets")
    assert any("runtime/runner.py:9: `import_module(" in note for note in report.notes)
    assert not [d for d in report.diagnostics if d.code == "MP401"]


@pytest.mark.parametrize("name", ["nvidia-dle-unet-medical", "google-automl-efficientdet", "tf-models-resnet"])
def test_real_projects_have_no_false_float16_output_findings(name):
    """Their heads are float32 already (model garden, EfficientNet) or have no saturating activation."""
    assert not [d for d in check(REAL / name).diagnostics if d.code in CODES]


def call_order_run(project: Path) -> str:
    """The compute dtype the fine-tuned model's first layer reports when `python main.py` runs for real."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONDONTWRITEBYTECODE="1", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_USE_LEGACY_KERAS", None)
    result = subprocess.run(
        [sys.executable, "main.py"], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()[-1]


def policy_first(tmp_path: Path) -> Path:
    """The call_order project with main() setting the policy before it loads the model: nothing is late."""
    project = shutil.copytree(PROJECTS / "call_order", tmp_path / "call_order")
    main = project / "main.py"
    main.write_text(
        main.read_text()
        .replace("from pkg.model", "import keras\nfrom pkg.model")
        .replace(
            "    model = load_model()",
            '    keras.mixed_precision.set_global_policy("mixed_float16")\n    model = load_model()',
        )
    )
    return project


def test_mp101_follows_the_order_of_calls_across_modules(tmp_path):
    """main.py: `model = load_model()` (pkg/model.py builds it) then `fine_tune(model)`, which sets mixed_float16
    before fitting the model it is given (issue 29): built first, so it trains in float32. Reported where the policy
    is set, also when that file is checked alone; silent when main() sets the policy before loading the model."""
    project = PROJECTS / "call_order"
    for paths in ([project], [project / "pkg" / "train.py"]):
        [finding] = [d for d in check(*paths).diagnostics if d.code == "MP101"]
        assert Path(finding.location.path).name == "train.py" and finding.location.line == 7
        assert "built by load_model() (" in finding.message and "model.py:5), called at " in finding.message
        assert "still compute in float32" in finding.message
    assert [d for d in check(policy_first(tmp_path)).diagnostics if d.code == "MP101"] == []


@tf_needed
def test_ground_truth_call_order_trains_in_float32_unless_the_policy_comes_first(tmp_path):
    assert call_order_run(PROJECTS / "call_order") == "compute dtype: float32"
    assert call_order_run(policy_first(tmp_path)) == "compute dtype: float16"


@tf_needed
def test_trace_names_the_entry_point_that_reaches_each_builder():
    """Issue 31: the trace builds every builder of models/heads.py under one policy; each finding names the policy
    line of the entry points that reach its own builder (both, for the shared one; the bfloat16 one in a note), and
    the builder reached only before any policy is set (float32 when run) gets nothing."""
    report = traced(PROJECTS / "two_entries" / "models" / "heads.py", legacy=False)
    found = {d.location.line: d for d in report.diagnostics if d.code == "MP401"}
    assert sorted(found) == [8, 12, 16]
    assert all("trace" in d.passes for d in found.values())
    onset, arrow = "train_onset.py:20 when --amp is given", "train_arrow.py:19 when --amp is given"
    origins = {line: re.findall(r"[\w/]+\.py:\d+ when --amp is given", d.message) for line, d in found.items()}
    assert {line: [o.rsplit("/", 1)[-1] for o in found] for line, found in origins.items()} == {
        8: [onset],
        12: [arrow],
        16: [arrow, onset],
    }
    assert found[8].context is not None and (found[8].context.set_at or "").endswith("/train_onset.py:20")
    # train_tpu.py runs the shared builder under mixed_bfloat16: said, not named as the trace's policy
    [note] = found[16].notes
    assert "also run this code under mixed_bfloat16, set in " in note and "train_tpu.py:17" in note
    assert not found[8].notes and not found[12].notes


@tf_needed
def test_trace_of_a_module_whose_builders_are_reached_in_different_ways():
    """Issue 31: each trace finding of pkg/models.py names the policy line that reaches its builder; the builder
    only a never-called callback reaches, and the one the helper runs in float32, get nothing (ground truth:
    test_ground_truth_policy_helpers)."""
    report = traced(PROJECTS / "policy_helpers" / "pkg" / "models.py", legacy=False)
    found = {d.location.line: d.message for d in report.diagnostics if d.code == "MP401"}
    assert sorted(found) == [9, 18, 27]
    assert "callback.py:18)" in found[9] and "pkg/amp.py:5)" in found[27]


@tf_needed
def test_trace_keeps_a_failed_import_of_a_library_module_imported_before_the_policy(tmp_path):
    """Issue 31: heads.py is imported before any policy is set; an import that fails there says nothing about a
    dtype and stays reported (the MP003 "not traced" info, or MP001 with --strict-imports)."""
    project = shutil.copytree(PROJECTS / "two_entries", tmp_path / "two_entries")
    heads = project / "models" / "heads.py"
    heads.write_text(heads.read_text().replace("import keras\n", "import keras\nimport not_installed_here_xyz\n", 1))
    report = traced(heads, legacy=False)
    assert [d.code for d in report.diagnostics if d.location.line == 5] in (["MP003"], ["MP001"])
