"""Shared test set-up: the test helpers on sys.path, and the `tf` marker on every test that needs TensorFlow (or
what comes with it: numpy, h5py, Keras), so that `pytest -m "not tf"` runs the rest without it.

A test needs TensorFlow when its module skips itself without it (a top-level `pytest.importorskip` of one of those
packages), when its own code does, or when it carries a skip condition about TensorFlow. The marker is derived from
those skips, so a new test that skips without TensorFlow is marked without anyone remembering to.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# Every run of the suite computes its results: a result replayed from the cache would hide what a test checks (that
# --jobs traces in parallel, what a stand-in child reports). tests/test_cache.py turns the cache on where it tests it.
os.environ["MPDOCTOR_NO_CACHE"] = "1"

_TF_PACKAGES = ("tensorflow", "tf_keras", "keras", "numpy", "h5py", "tensorflow_hub")
_SKIPS_WITHOUT_TF = re.compile(r"importorskip\(\s*[\"'](?:{})[\"']".format("|".join(_TF_PACKAGES)))
_TF_REASON = re.compile(r"tensorflow|tf_keras", re.IGNORECASE)


@functools.cache
def _module_needs_tf(path: str) -> bool:
    """A top-level `pytest.importorskip("tensorflow")` (or numpy...) skips the whole module without TensorFlow."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if _SKIPS_WITHOUT_TF.search(ast.unparse(statement)):
            return True
    return False


def _test_needs_tf(item: pytest.Item) -> bool:
    if _module_needs_tf(str(item.path)):
        return True
    if any(_TF_REASON.search(str(mark.kwargs.get("reason", ""))) for mark in item.iter_markers("skipif")):
        return True
    function = getattr(item, "function", None)
    try:
        source = inspect.getsource(function) if function is not None else ""
    except (OSError, TypeError):
        source = ""
    return bool(_SKIPS_WITHOUT_TF.search(source))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tf" not in item.keywords and _test_needs_tf(item):
            item.add_marker(pytest.mark.tf)
