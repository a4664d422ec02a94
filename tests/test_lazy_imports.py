"""`mpdoctor --help`, `mpdoctor rules` and `mpdoctor check --no-trace` must never import TensorFlow (nor the trace's
process management)."""

import os
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import sys
    from mpdoctor.cli import main
    try:
        code = main({argv!r})
    except SystemExit as exit:
        code = exit.code
    # also the trace's process management (subprocess, secrets...): start-up time of every static run
    heavy = sorted(m for m in ("tensorflow", "keras", "tf_keras", "tensorflow_hub", "numpy", "libcst",
                               "mpdoctor.trace.processes") if m in sys.modules)
    print("HEAVY=" + ",".join(heavy), file=sys.stderr)
""")


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--version"],
        ["rules"],
        ["explain", "MP201"],
        ["check", "--no-trace", "{model}"],
        ["check", "--no-trace", "--format", "sarif", "{model}"],
        ["check", "--no-trace", "--format", "sarif", "{notebook}"],
        ["check", "--no-trace", "--write-baseline", "{baseline}", "{model}"],
    ],
)
def test_no_heavy_imports(tmp_path, argv):
    import json

    model = tmp_path / "model.py"
    model.write_text(
        "import tensorflow as tf\nimport tensorflow_hub as hub\n"
        "tf.keras.mixed_precision.set_global_policy('mixed_float16')\n"
        "m = tf.keras.Sequential([hub.KerasLayer('/x'), tf.keras.layers.Dense(3, activation='softmax')])\n"
    )
    notebook = tmp_path / "model.ipynb"
    notebook.write_text(
        json.dumps(
            {
                "nbformat": 4,
                "nbformat_minor": 5,
                "metadata": {},
                "cells": [
                    {
                        "cell_type": "code",
                        "metadata": {},
                        "outputs": [],
                        "source": ["%pip install x\n", model.read_text()],
                    }
                ],
            }
        )
    )
    argv = [a.format(model=model, notebook=notebook, baseline=tmp_path / "baseline.json") for a in argv]
    result = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True)
    heavy_line = [line for line in result.stderr.splitlines() if line.startswith("HEAVY=")]
    assert heavy_line == ["HEAVY="], result.stderr


def test_fix_without_trace_loads_libcst_only_then(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(
        "import tensorflow as tf\ntf.keras.mixed_precision.set_global_policy('mixed_float16')\n"
        "m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3, activation='softmax')])\n"
    )
    argv = ["check", "--fix", "--no-trace", str(model)]
    result = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True)
    assert [line for line in result.stderr.splitlines() if line.startswith("HEAVY=")] == ["HEAVY=libcst"]
    assert 'dtype="float32")' in model.read_text()


STARTUP_PROBE = textwrap.dedent("""
    import sys
    from mpdoctor.cli import main
    try:
        main({argv!r})
    except SystemExit:
        pass
    print("LOADED=" + ",".join(m for m in {modules!r} if m in sys.modules), file=sys.stderr)
""")


def _installed_as_wheels(tmp_path) -> dict[str, str]:
    """An environment for a child Python in which TensorFlow 2.21, Keras 3 and tensorflow-hub are installed, as the
    static pass reads it: their wheels' `.dist-info` directories, first on sys.path (where TensorFlow is not
    installed, the static pass asks importlib.metadata, rightly)."""
    site = tmp_path / "site"
    for wheel in ("tensorflow-2.21.0", "keras-3.15.1", "tensorflow_hub-0.16.1", "tf_keras-2.21.0"):
        (site / f"{wheel}.dist-info").mkdir(parents=True)
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))


def test_a_static_run_imports_only_what_it_uses(tmp_path):
    """Start-up is the serial part of every static run: the trace's record classes, the project analysis (no
    project here), the baseline's hashing, the plan, importlib.metadata (the installed versions come from the
    wheels' directory names) stay unimported; a run with a baseline imports its module."""
    env = _installed_as_wheels(tmp_path)
    model = tmp_path / "model.py"
    model.write_text("import tensorflow as tf\ntf.keras.mixed_precision.set_global_policy('mixed_float16')\n")
    modules = ["mpdoctor.facts.schema", "mpdoctor.baseline", "mpdoctor.plan"]
    modules += ["mpdoctor.project.analysis", "mpdoctor.project.evaluation", "mpdoctor.project.modules"]
    modules += ["importlib.metadata", "tempfile", "hashlib"]
    argv = ["check", "--no-trace", "--format", "json", str(model)]
    result = subprocess.run(
        [sys.executable, "-c", STARTUP_PROBE.format(argv=argv, modules=modules)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert [line for line in result.stderr.splitlines() if line.startswith("LOADED=")] == ["LOADED="], result.stderr
    baseline = tmp_path / "baseline.json"
    argv = ["check", "--no-trace", "--write-baseline", str(baseline), str(model)]
    result = subprocess.run(
        [sys.executable, "-c", STARTUP_PROBE.format(argv=argv, modules=["mpdoctor.baseline"])],
        capture_output=True,
        text=True,
        env=env,
    )
    assert "LOADED=mpdoctor.baseline" in result.stderr.splitlines() and baseline.exists()
