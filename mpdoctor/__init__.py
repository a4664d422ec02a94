"""mpdoctor: a mixed-precision compatibility doctor for TensorFlow/Keras.

Importing this package is cheap: nothing here imports TensorFlow.
"""

from mpdoctor._version import __version__

__all__ = ["__version__", "check_file", "check_paths", "load_ipython_extension"]


def check_paths(paths, config=None):
    """Check files/directories with the static pass; returns an ``mpdoctor.engine.Report``."""
    from pathlib import Path

    from mpdoctor.config import load_config
    from mpdoctor.engine import check_paths as _check

    paths = [Path(p) for p in paths]
    return _check(paths, config or load_config(paths[0] if paths else Path.cwd()))


def check_file(path, config=None):
    return check_paths([path], config)


def load_ipython_extension(ipython):
    """`%load_ext mpdoctor`: the %mpdoctor / %%mpdoctor magics (mpdoctor.jupyter; IPython is imported only here)."""
    from mpdoctor.jupyter import load_ipython_extension as load

    load(ipython)
