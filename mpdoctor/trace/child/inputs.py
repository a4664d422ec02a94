"""What the run read besides the checked file, for the result cache (mpdoctor/cache.py): local modules it imported,
files it opened for reading (Python's `open` audit event), checkpoints it restored and SavedModels it loaded; and
what else its result depends on (schema.Lookups): paths whose existence it tested (os.stat, os.path.exists,
pathlib...), directories it listed (the `os.listdir`/`os.scandir` audit events) and environment variables it read.

Recording starts before TensorFlow is imported (in the fork server, which imports it once for every child, or at
the start of a child of its own): Keras reads keras.json and its variables at import. Files of the Python
installation (the standard library, site-packages, mpdoctor itself) and of the trace's own temporary directory are
left out: the cache keys the installed versions instead. What TensorFlow's C++ reads directly (tf.data, gfile,
getenv) is not seen here: the cache keys TensorFlow's own variables by name instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import site
import sys
import types
from collections.abc import Iterator

from mpdoctor.facts.schema import Lookups

_opened: set[str] = set()
_probed: set[str] = set()
_listed: set[str] = set()
_environment: dict[str, str | None] = {}  # variable -> digest of the value first read (None: unset)
_written: set[str] = set()  # variables the run set before reading them: their outside value does not matter
_state: dict = {"started": False, "paused": False}


def start() -> None:
    """Record from now on (an audit hook cannot be removed: the child ends anyway). Once per process: a fork of
    the fork server keeps what the server recorded while importing TensorFlow."""
    if _state["started"]:
        return
    _state["started"] = True
    sys.addaudithook(_on_event)
    for name in ("stat", "lstat", "access"):
        original = getattr(os, name)
        setattr(os, name, _probing(original))
        for supported in (os.supports_dir_fd, os.supports_fd, os.supports_follow_symlinks, os.supports_effective_ids):
            if original in supported:  # shutil.rmtree and others test `os.stat in os.supports_dir_fd`
                supported.add(getattr(os, name))
    os.environ.__class__ = _RecordingEnviron
    if hasattr(os, "environb"):  # os.getenvb: the same variables as bytes
        os.environb.__class__ = _RecordingEnviron


@contextlib.contextmanager
def unrecorded() -> Iterator[None]:
    """mpdoctor's own changes of the environment (the fork server giving a child its environment) are no reads."""
    _state["paused"] = True
    try:
        yield
    finally:
        _state["paused"] = False


def _on_event(event: str, args: tuple) -> None:
    if _state["paused"]:
        return
    if event in ("os.listdir", "os.scandir"):
        if args and isinstance(args[0], (str, bytes)):
            _listed.add(os.path.abspath(os.fsdecode(args[0])))
        elif args and args[0] is None:
            _listed.add(os.getcwd())
        return
    if event != "open":
        return
    path, mode, flags = (args + (None, None, None))[:3]
    if not isinstance(path, (str, bytes)):  # an open file descriptor
        return
    if isinstance(mode, str) and not any(c in mode for c in "r+"):
        return
    if mode is None and isinstance(flags, int) and flags & os.O_WRONLY:  # os.open for writing only
        return
    if isinstance(flags, int) and flags & os.O_CREAT and flags & os.O_EXCL:  # a file made new (tempfile): no input
        return
    _opened.add(os.path.abspath(os.fsdecode(path)))  # now: the run may change its directory later


def _probing(function):
    def probe(path, *args, **kwargs):
        if not _state["paused"] and isinstance(path, (str, bytes, os.PathLike)) and kwargs.get("dir_fd") is None:
            with contextlib.suppress(TypeError, ValueError, OSError):
                _probed.add(os.path.abspath(os.fsdecode(path)))
        return function(path, *args, **kwargs)

    probe.__wrapped__ = function  # type: ignore[attr-defined]
    return probe


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()


class _RecordingEnviron(os._Environ):  # type: ignore[type-arg, name-defined]
    """os.environ noting each variable read (os.getenv, `in`, get, iteration) with the value seen."""

    def __getitem__(self, key):
        try:
            value = super().__getitem__(key)
        except KeyError:
            self._saw(key, None)
            raise
        if not _enumerated_by_a_library():
            self._saw(key, value)
        return value

    def __setitem__(self, key, value) -> None:
        self._wrote(key)
        super().__setitem__(key, value)

    def __delitem__(self, key) -> None:
        self._wrote(key)
        super().__delitem__(key)

    def __iter__(self):
        names = list(super().__iter__())
        if not _enumerated_by_a_library():
            for name in names:  # the run looked at the whole environment: every variable counts
                self._saw(name, super().__getitem__(name))
        return iter(names)

    @staticmethod
    def _saw(key, value) -> None:
        if _state["paused"] or not isinstance(key, (str, bytes)):
            return
        key = os.fsdecode(key)
        if key not in _written and key not in _environment:
            _environment[key] = None if value is None else _digest(os.fsdecode(value))

    @staticmethod
    def _wrote(key) -> None:
        if not _state["paused"] and isinstance(key, (str, bytes)) and os.fsdecode(key) not in _environment:
            _written.add(os.fsdecode(key))


_PLUMBING = {"<frozen _collections_abc>", os.__file__, __file__}  # frames between a reader and os.environ


def _enumerated_by_a_library() -> bool:
    """Whether an installed package is going through the whole environment (networkx collects its NETWORKX_*
    variables at import): not a dependence on every variable. Its own reads by name are recorded; the installed
    versions are in the cache key."""
    frame: types.FrameType | None = sys._getframe(1)
    enumerating = False
    while frame is not None and frame.f_code.co_filename in _PLUMBING:
        enumerating = enumerating or frame.f_code.co_name == "__iter__"
        frame = frame.f_back
    return enumerating and frame is not None and frame.f_code.co_filename.startswith(_site_packages())


def _site_packages() -> tuple[str, ...]:
    if "site" not in _state:
        try:
            places = [*site.getsitepackages(), site.getusersitepackages()]
        except (AttributeError, TypeError):
            places = []
        _state["site"] = tuple(os.path.abspath(p) + os.sep for p in places if p)
    return _state["site"]


def collect(facts, user_file: str, temporary: str) -> list[str]:
    """Absolute paths of what the run read, sorted, without the installation's files; sets `facts.lookups`."""
    _state["paused"] = True  # what mpdoctor itself looks at from here on is not the run's
    excluded = _excluded(temporary)
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
    # Bytecode stands for its source, which is kept (a .pyc written later must not make the entry stale).
    kept = {p for p in _kept(found, excluded) if p != user_file and not p.endswith(".pyc")}
    facts.lookups = Lookups(
        probed=sorted(set(_kept(_probed, excluded)) - kept - {user_file}),
        listed=sorted(_kept(_listed, excluded)),
        environment=dict(sorted(_environment.items())),
    )
    return sorted(kept)


def _kept(paths: set[str], excluded: tuple[str, ...]) -> list[str]:
    kept = []
    for path in paths:
        absolute = os.path.abspath(path)
        if not (absolute + os.sep).startswith(excluded):
            kept.append(absolute)
    return kept


def _excluded(temporary: str) -> tuple[str, ...]:
    return tuple(_installation()) + (os.path.abspath(temporary) + os.sep, "/proc/", "/dev/", "/sys/")


def _installation() -> list[str]:
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # mpdoctor itself
    places = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, package}
    try:
        places.update(site.getsitepackages())
        places.add(site.getusersitepackages())
    except (AttributeError, TypeError):  # a virtualenv's old site module
        pass
    return [os.path.abspath(p) + os.sep for p in places if p]
