"""Shared test set-up: the test helpers on sys.path, and the `tf` marker on every test that needs TensorFlow (or
what comes with it: numpy, h5py, Keras, tf_keras, tensorflow_hub), so that `pytest -m "not tf"` runs the rest
without it.

A test needs TensorFlow when it requests the `tensorflow` fixture below (directly, through another fixture, or with
`pytest.mark.usefixtures("tensorflow")`, also as a module's `pytestmark`), or when its module calls
`pytest.importorskip` of one of those packages while it is imported (the module is skipped without them). Both are
seen as they happen, not guessed from the source: the fixture request is in `item.fixturenames`, and the
module-level skips are noted by the `pytest.importorskip` below. That same function fails a test that imports one of
those packages with `pytest.importorskip` without being marked (it would be skipped, silently, where TensorFlow is
missing), and the no-TensorFlow stage (ci/no_tf.py: a venv without them, and MPDOCTOR_TEST_BLOCK_TF=1, see
no_tf/tf_blocker.py) fails a test that imports one of them any other way.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
# Every run of the suite computes its results: a result replayed from the cache would hide what a test checks (that
# --jobs traces in parallel, what a stand-in child reports). tests/test_cache.py turns the cache on where it tests it.
os.environ["MPDOCTOR_NO_CACHE"] = "1"

from no_tf import tf_blocker  # noqa: E402  (the helpers' directory is on sys.path from here on)
from no_tf.tf_blocker import blocked  # noqa: E402

if os.environ.get(tf_blocker.ENV) == "1":
    # This process, and every Python it starts (through no_tf/sitecustomize.py), as if TensorFlow were not installed.
    tf_blocker.install()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE / "no_tf"), os.environ.get("PYTHONPATH")]))


@pytest.fixture(scope="session")
def tensorflow():
    """Requested by the tests that need TensorFlow (and the fixtures that make what they need with it): the request
    is what marks a test `tf`. Skips where TensorFlow is not installed. Found, not imported: importing it costs 5-20 s,
    and a test process that forks had better not hold it; the tests that need the module import it."""
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("needs TensorFlow")


@pytest.fixture
def pinned_target(tmp_path):
    """tmp_path as a project that declares the TensorFlow the tests' expected outputs are written for (a copy of
    tests/requirements.txt): what mpdoctor reports there does not depend on the TensorFlow installed, or on none."""
    shutil.copy(HERE / "requirements.txt", tmp_path / "requirements.txt")
    return tmp_path


@pytest.fixture
def recorded_environment():
    """The static pass sees the installed packages the expected outputs were reviewed next to (TensorFlow 2.21,
    Keras 3, tensorflow-hub: tests/golden/snapshot.py's RECORDED_ENVIRONMENT), whatever is installed, or nothing."""
    sys.path.insert(0, str(HERE / "golden"))
    try:
        import snapshot
    finally:
        sys.path.remove(str(HERE / "golden"))
    with snapshot.recorded_environment():
        yield


_importorskip = pytest.importorskip
_modules_needing_tf: set[str] = set()  # test files whose import skips without TensorFlow
_running: list[pytest.Item] = []  # the test being run, while it runs


def _importorskip_noting_tf(modname: str, *args, **kwargs):
    """`pytest.importorskip`, which also notes who asks for TensorFlow or what comes with it: a test module asking
    while it is imported is a TensorFlow module (every test in it is marked); a test asking while it runs must be
    marked already (request the `tensorflow` fixture)."""
    __tracebackhide__ = True  # a skip or a failure is reported where the test asked
    if blocked(modname):
        caller = sys._getframe(1)
        if caller.f_code.co_name == "<module>":
            _modules_needing_tf.add(os.path.realpath(caller.f_code.co_filename))
        elif _running and _running[-1].get_closest_marker("tf") is None:
            pytest.fail(f"imports {modname} without the `tf` marker: request the `tensorflow` fixture", pytrace=False)
    return _importorskip(modname, *args, **kwargs)


pytest.importorskip = _importorskip_noting_tf


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _requests_tensorflow(item) or os.path.realpath(item.path) in _modules_needing_tf:
            item.add_marker(pytest.mark.tf)
    # The slow tests first: with -n they start at once on every worker, instead of ending the run on one of them.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _requests_tensorflow(item: pytest.Item) -> bool:
    """The `tensorflow` fixture is in the test's closure, and not a parameter of the same name that hides it."""
    parameters = item.callspec.params if hasattr(item, "callspec") else {}
    return "tensorflow" in getattr(item, "fixturenames", ()) and "tensorflow" not in parameters


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()
