"""Reliability under hostile or broken model code (issue 8): the static pass never runs user code; whatever the
model code does in the trace child (hang, exit, kill itself, blow up memory, flood stdout, change directory,
delete its own file, save models and checkpoints), mpdoctor ends normally with a clear MP001 where the run failed,
the static findings are still reported, and nothing in the user's tree is created or changed except by the code's
own plain file writes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mpdoctor.config import Config
from mpdoctor.engine import check_paths

ROOT = Path(__file__).resolve().parent.parent
# A float16 softmax output: MP401 on line 3 statically, confirmed by the trace when the model code runs.
MODEL = (
    "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\n"
    "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation='softmax')])\n"
)


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every file and directory under root: (mtime_ns, sha256) for files, (mtime_ns, "dir") for directories."""
    found = {}
    for path in sorted(root.rglob("*")):
        stat = path.stat()
        found[str(path.relative_to(root))] = (
            stat.st_mtime_ns,
            "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest(),
        )
    return found


def run_cli(*args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = dict(os.environ if env is None else env, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "mpdoctor", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
        check=False,
    )


# ---------------------------------------------------------------------------------------------- static pass


def test_static_pass_never_executes_user_code(tmp_path):
    canary = tmp_path / "canary.txt"
    project = tmp_path / "project"
    project.mkdir()
    body = f"open({str(canary)!r}, 'w').write('ran')\n"
    (project / "model.py").write_text(MODEL + body)
    (project / "helpers.py").write_text(body)
    (project / "conftest.py").write_text(body)
    (project / "pyproject.toml").write_text("[tool.mpdoctor]\nfail-on = 'error'\n")
    before = snapshot(project)
    report = check_paths([project], Config())
    assert [(d.code, d.location.line) for d in report.diagnostics] == [("MP401", 3)]
    result = run_cli("check", "--no-trace", ".", cwd=project)
    assert result.returncode == 1 and "MP401" in result.stdout, result.stderr
    assert not canary.exists()
    assert snapshot(project) == before  # no __pycache__, no cache directory


def test_html_report_escapes_hostile_paths_and_file_errors(tmp_path):
    """tests/test_report_html.py covers layer names, messages and source lines; here: file names and errors."""
    import io

    from mpdoctor.report.html import render

    hostile = '<img src=x onerror="alert(1)">'
    project = tmp_path / hostile
    project.mkdir()
    (project / f"{hostile}.py").write_text(MODEL)
    (project / "broken.py").write_text(f"def f(:\n    '{hostile}'\n")
    report = check_paths([project], Config())
    assert report.diagnostics and report.errors
    out = io.StringIO()
    render(report, out)
    html = out.getvalue()
    assert "<img" not in html and "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in html
    assert 'onerror="' not in html


def test_two_trace_findings_on_one_static_line_merge_without_error():
    """Regression: a second trace finding for a line the first already confirmed raised ValueError in
    merge_passes (seen with sys.exit after a Keras 3 Sequential, whose inner Functional was analysed too)."""
    from mpdoctor.diagnostics import Diagnostic, Location, Severity
    from mpdoctor.engine import merge_passes

    static = Diagnostic("MP401", "static", Location("m.py", 3, 46), Severity.ERROR, passes=("static",))
    first = Diagnostic("MP401", "trace", Location("m.py", 3, 46), Severity.ERROR, passes=("trace",))
    second = Diagnostic("MP401", "trace again", Location("m.py", 3, 1), Severity.ERROR, passes=("trace",))
    merged = merge_passes([static], [first, second])
    assert [(d.message, d.passes) for d in merged] == [("trace", ("static", "trace")), ("trace again", ("trace",))]


# ---------------------------------------------------------------------------------------------- trace pass

needs_tf = pytest.mark.usefixtures("tensorflow")  # everything below runs the trace child

from trace_support import codes_at, trace_check  # noqa: E402

HUGE_OUTPUT = (
    "import sys\nline = 'x' * 1023 + '\\n'\nfor _ in range(200 * 1024):\n    sys.stdout.write(line)\n"
    "print('last words')\n"
)


@needs_tf
@pytest.mark.parametrize(
    "body,reason",
    [
        ("while True:\n    pass\n", "the trace ran out of time at line 4 of hostile.py (timeout 20 s)"),
        ("import os\nos._exit(3)\n", "exited with code 3"),
        ("import sys\nsys.exit(3)\n", "raised SystemExit: the file called sys.exit(3) on import"),
        ("raise SystemExit\n", "raised SystemExit: the file called sys.exit(None) on import"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "killed by SIGKILL"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "killed by SIGSEGV"),
        ("import os\nos.remove(__file__)\n", "deleted or moved this file while it ran"),
    ],
    ids=["hang", "os._exit", "sys.exit", "SystemExit", "SIGKILL", "SIGSEGV", "deletes-itself"],
)
def test_hostile_model_code_becomes_mp001_and_static_findings_survive(tmp_path, body, reason):
    script = tmp_path / "hostile.py"
    script.write_text(MODEL + body)
    diagnostics = trace_check(script, legacy=False, timeout=20)
    assert ("MP401", 3) in codes_at(diagnostics)
    [mp001] = [d for d in diagnostics if d.code == "MP001"]
    assert reason in mp001.message, mp001.message


@needs_tf
def test_memory_limit_kills_the_child_with_a_clear_reason(tmp_path):
    hog = tmp_path / "hog.py"
    hog.write_text(MODEL + "hog = []\nwhile True:\n    hog.append(bytearray(64 << 20))\n")
    diagnostics = trace_check(hog, legacy=False, timeout=300, memory_limit_mb=1500)
    [mp001] = [d for d in diagnostics if d.code == "MP001"]
    assert "exceeded the memory limit of 1500 MiB (--trace-memory)" in mp001.message
    assert ("MP401", 3) in codes_at(diagnostics)
    # Control: the same model without the allocation loop stays under the same limit (TensorFlow itself fits).
    calm = tmp_path / "calm.py"
    calm.write_text(MODEL)
    diagnostics = trace_check(calm, legacy=False, timeout=300, memory_limit_mb=1500)
    assert not [d.message for d in diagnostics if d.code == "MP001"]
    assert [d.passes for d in diagnostics if d.code == "MP401"] == [("static", "trace")]


@needs_tf
def test_trace_memory_option_and_config_are_validated(tmp_path):
    (tmp_path / "m.py").write_text("x = 1\n")
    bad = run_cli("check", "--trace-memory", "-5", "m.py", cwd=tmp_path)
    assert (
        bad.returncode == 2
        and bad.stderr.strip()
        == "mpdoctor: error: argument --trace-memory: expected a positive number of MiB, got '-5'"
    )
    (tmp_path / "pyproject.toml").write_text("[tool.mpdoctor]\ntrace-memory = 'lots'\n")
    bad = run_cli("check", "m.py", cwd=tmp_path)
    assert bad.returncode == 2 and "trace-memory: expected a positive number of MiB, got 'lots'" in bad.stderr


PEAK_RSS = textwrap.dedent("""\
    import runpy, sys
    sys.argv = ["mpdoctor", *sys.argv[1:]]
    try:
        runpy.run_module("mpdoctor", run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(f"PEAK {peak} {code}", file=sys.stderr)
    """)


@needs_tf
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_huge_stdout_is_drained_with_bounded_memory_and_the_run_succeeds(tmp_path):
    script = tmp_path / "chatty.py"
    script.write_text(MODEL + HUGE_OUTPUT)
    before = snapshot(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, "check", "--trace", "--format", "json", script.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    peak_kib, code = result.stderr.strip().splitlines()[-1].split()[1:]
    found = [
        (d["code"], d["line"], d["passes"]) for d in json.loads(result.stdout)["diagnostics"] if d["code"] != "MP603"
    ]  # MP603: no GPU on this machine
    assert code == "1" and found == [("MP401", 3, ["static", "trace"])], result.stdout
    assert int(peak_kib) < 200 * 1024  # 200 MiB went through the pipe; mpdoctor kept only its tail
    assert snapshot(tmp_path) == before


@needs_tf
def test_changing_the_working_directory_does_not_break_the_trace(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = tmp_path / "wanders.py"
    script.write_text(
        f"import os\nos.chdir({str(elsewhere)!r})\n" + MODEL.replace("import keras\n", "import keras\n\n")
    )
    diagnostics = trace_check(script, legacy=False)
    assert [(d.code, d.location.line, d.passes) for d in diagnostics if d.code != "MP603"] == [
        ("MP401", 6, ("static", "trace"))
    ]


@needs_tf
def test_a_file_deleting_itself_still_gets_every_report_format(tmp_path):
    script = tmp_path / "vanishing.py"
    source = MODEL + "import os\nos.remove(__file__)\n"
    for fmt in ("text", "json", "sarif", "github", "junit", "gitlab", "html"):
        script.write_text(source)
        result = run_cli("check", "--trace", "--format", fmt, "--trace-timeout", "120", script.name, cwd=tmp_path)
        assert result.returncode == 1 and not result.stderr, (fmt, result.stderr)
        assert "MP401" in result.stdout and "deleted or moved this file" in result.stdout, fmt
        assert not script.exists()


USER_PACKAGE = {
    "helpers.py": "def width():\n    return 8\n",
    "keras3_model.py": """\
        import os

        import keras
        import tensorflow as tf

        from helpers import width

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(width()),
                                  keras.layers.Dense(2, dtype="float32")])
        model(tf.ones((1, 4)))
        model.save("out/model.keras")
        model.save_weights("out/model.weights.h5")
        model.export("serving")
        again = keras.models.load_model("out/model.keras")
        model.load_weights("out/model.weights.h5")
        checkpoint = tf.train.Checkpoint(model=model)
        saved = checkpoint.save("ckpt/run")
        checkpoint.restore(saved).assert_consumed()
        checkpoint.restore(tf.train.latest_checkpoint("ckpt"))
        checkpoint.write("ckpt/exact")
        checkpoint.read("ckpt/exact")
        manager = tf.train.CheckpointManager(checkpoint, "managed", max_to_keep=1)
        manager.save()
        tf.saved_model.save(tf.Module(), "exported")
        tf.saved_model.load("exported")
        with open("log.txt", "w") as log:  # a plain write: the user's own business
            log.write("done")
        """,
    "tf_keras_model.py": """\
        import os

        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import tensorflow as tf

        from helpers import width

        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        model = tf.keras.Sequential([tf.keras.layers.Dense(width(), input_shape=(4,)),
                                     tf.keras.layers.Dense(2, dtype="float32")])
        model.save("out/model.h5")
        model.save_weights("out/weights.h5")
        model.save("out/savedmodel")
        again = tf.keras.models.load_model("out/model.h5")
        model.load_weights("out/weights.h5")
        saved = tf.train.Checkpoint(model=model).save("ckpt/run")
        tf.train.Checkpoint(model=model).restore(saved)
        """,
}


@needs_tf
@pytest.mark.parametrize(
    "script,legacy", [("keras3_model.py", False), ("tf_keras_model.py", True)], ids=["keras3", "tf_keras"]
)
def test_saves_by_known_apis_never_touch_the_users_tree(tmp_path, monkeypatch, script, legacy):
    project = tmp_path / "project"
    project.mkdir()
    for name, text in USER_PACKAGE.items():
        (project / name).write_text(textwrap.dedent(text))
    monkeypatch.chdir(project)  # relative save paths resolve against the caller's working directory
    before = snapshot(project)
    summaries = []
    diagnostics = trace_check(project / script, legacy=legacy, summaries=summaries)
    assert not [d.message for d in diagnostics if d.code == "MP001"]  # every load found what the run saved
    # What the report shows names the paths the code gave, never the scratch directory the saves went to.
    shown = json.dumps([s.to_json() for s in summaries]) + json.dumps([d.message for d in diagnostics])
    assert "mpdoctor-trace" not in shown and "scratch" not in shown
    assert "ckpt/run-1" in shown or script == "tf_keras_model.py"  # the restored checkpoint, as the code named it
    after = snapshot(project)
    created = sorted(set(after) - set(before))
    assert created == (["log.txt"] if script == "keras3_model.py" else [])
    assert {k: v for k, v in after.items() if k in before} == before
