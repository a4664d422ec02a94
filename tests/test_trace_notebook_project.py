"""A notebook under a package project's examples/ imports the project's package (issue 31, measured on
qubvel/segmentation_models, karolzak/keras-unet and kpe/bert-for-tf2 in tests/data/real_repos): its kernel, started
in the project or after `pip install -e .`, sees the package as a script there does. The trace put the project's
roots on sys.path for scripts only, so the notebook failed with "No module named ..." as an MP001 error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PACKAGE = """\
import keras


def unet_mini(classes):
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    outputs = keras.layers.Conv2D(classes, 1, activation="sigmoid")(x)
    return keras.Model(inputs, outputs)
"""

CELLS = [
    "import keras\nimport numpy as np\nfrom segkit import unet_mini",
    "model = unet_mini(2)\nmodel.compile('adam', 'mse')",
]


def test_a_notebook_in_a_subdirectory_imports_the_projects_package(tmp_path, tensorflow):
    (tmp_path / "setup.py").write_text(
        "from setuptools import find_packages, setup\n\nsetup(packages=find_packages())\n"
    )
    (tmp_path / "segkit").mkdir()
    (tmp_path / "segkit" / "__init__.py").write_text(PACKAGE)
    (tmp_path / "examples").mkdir()
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": c} for c in CELLS]
    notebook = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "examples" / "demo.ipynb").write_text(json.dumps(notebook))
    done = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--no-cache", "--trace", "--format", "json", "examples/demo.ipynb"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=600,
        check=False,
    )
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["diagnostics"] == [], report["diagnostics"]
    [record] = report["traces"]
    assert record["status"] == "ok" and len(record["models"]) == 1, record
