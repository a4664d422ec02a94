"""Makes TensorFlow and what comes with it unimportable, as if not installed: `import tensorflow` raises
ModuleNotFoundError and `importlib.util.find_spec("tensorflow")` is None. The no-TensorFlow stage (ci/no_tf.py, or
MPDOCTOR_TEST_BLOCK_TF=1 in any venv) turns it on, so that `pytest -m "not tf"` proves those tests need none of
it even where it is installed. Only imports are hidden: the packages' metadata (`*.dist-info`, which mpdoctor's
static pass reads to learn the installed versions) stays visible; the stage's own venv has none.

Standard library only: sitecustomize.py beside it installs it in every child Python of the run.
"""

from __future__ import annotations

import importlib.machinery
import sys

ENV = "MPDOCTOR_TEST_BLOCK_TF"
# TensorFlow, Keras and the packages that come with them (installing TensorFlow brings numpy, h5py, ml_dtypes).
BLOCKED = frozenset(
    {"tensorflow", "tf_keras", "keras", "numpy", "h5py", "ml_dtypes", "tensorflow_hub", "keras_hub", "tensorflow_text"}
)


def blocked(name: str) -> bool:
    return name.partition(".")[0] in BLOCKED


class PathFinderWithoutTensorFlow(importlib.machinery.PathFinder):
    """The standard finder of modules on sys.path, blind to the blocked packages (the next finder, if any, does not
    find them either: they are on sys.path only)."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if blocked(fullname):
            return None
        return super().find_spec(fullname, path, target)


def install() -> None:
    """Replace the standard path finder (the import-rewriting and editable-install finders stay as they are)."""
    already = sorted(name for name in sys.modules if blocked(name) and "." not in name)
    if already:
        raise RuntimeError(f"{ENV}: {', '.join(already)} imported before the blocker was installed")
    sys.meta_path[:] = [
        PathFinderWithoutTensorFlow if finder is importlib.machinery.PathFinder else finder for finder in sys.meta_path
    ]
    importlib.invalidate_caches()
