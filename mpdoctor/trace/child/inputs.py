"""What the run read besides the checked file, for the result cache (mpdoctor/cache.py): local modules it imported,
files it opened for reading (Python's `open` audit event), checkpoints it restored and SavedModels it loaded.

Files of the Python installation (the standard library, site-packages, mpdoctor itself) and of the trace's own
temporary directory are left out: the cache keys the installed versions instead. What TensorFlow's C++ reads
directly (tf.data, gfile) is not seen here; the restores and SavedModel loads the hooks record are added by path.
"""

from __future__ import annotations

import os
import site
import sys

_opened: set[str] = set()


def start() -> None:
    """Record every file opened for reading from now on (an audit hook cannot be removed: the child ends anyway)."""
    sys.addaudithook(_on_event)


def _on_event(event: str, args: tuple) -> None:
    if event != "open":
        return
    path, mode, flags = (args + (None, None, None))[:3]
    if not isinstance(path, (str, bytes)):  # an open file descriptor
        return
    if isinstance(mode, str) and not any(c in mode for c in "r+"):
        return
    if mode is None and isinstance(flags, int) and flags & os.O_WRONLY:  # os.open for writing only
        return
    _opened.add(os.fsdecode(path))


def collect(facts, user_file: str, temporary: str) -> list[str]:
    """Absolute paths of what the run read, sorted, without the installation's files."""
    excluded = tuple(_installation()) + (os.path.abspath(temporary) + os.sep, "/proc/", "/dev/", "/sys/")
    found = set(_opened)
    for module in list(sys.modules.values()):
        location = getattr(module, "__file__", None)
        if isinstance(location, str):
            found.add(location)
    found.update(r.path for r in facts.restores if isinstance(r.path, str))
    found.update(
        load.handle for load in facts.savedmodel_loads if isinstance(load.handle, str) and "://" not in load.handle
    )
    user_file = os.path.abspath(user_file)
    kept = set()
    for path in found:
        absolute = os.path.abspath(path)
        # Bytecode stands for its source, which is kept (a .pyc written later must not make the entry stale).
        if absolute != user_file and not absolute.startswith(excluded) and not absolute.endswith(".pyc"):
            kept.add(absolute)
    return sorted(kept)


def _installation() -> list[str]:
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # mpdoctor itself
    places = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, package}
    try:
        places.update(site.getsitepackages())
        places.add(site.getusersitepackages())
    except (AttributeError, TypeError):  # a virtualenv's old site module
        pass
    return [os.path.abspath(p) + os.sep for p in places if p]
