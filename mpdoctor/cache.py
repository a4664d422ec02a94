"""The result cache (`.mpdoctor_cache/`): one file's whole result (static and trace diagnostics, fixes included,
its error and its trace summary), replayed when nothing it depends on changed.

The unit is the per-file result of both passes: the trace is the expensive part, and the static findings are
merged with the trace's verdicts, so caching either pass alone would replay nothing useful.

An entry is found by a key over what is known before the run: the file's text, its resolved target and project
policy contexts, the configuration that shapes per-file results, the trace options (--checkpoint and --sample files
by fingerprint), mpdoctor's version and source, the installed TensorFlow/Keras/tf_keras/tensorflow-hub versions
(read with importlib.metadata, never by importing them) and the environment variables TensorFlow's C++ side may
read. The entry then lists what the run read, as the trace child recorded it: local modules, opened files (keras.json
too), restored checkpoints and loaded SavedModels with their fingerprints, the paths whose existence it tested, the
directories it listed and the environment variables it read; any that differ now make it a miss.

An entry is untrusted (a shared or restored cache directory): it is read as a regular file of bounded size, checked
against its schema, and the fixes it replays must be the ones the static pass derives from the source now, else it
is a miss (a fix only the trace derives is not stored). Fingerprints read only regular files, bounded too: a FIFO or
a device among the inputs makes the result not cacheable, never a hang. Anything unreadable is a miss, never an
error; entries are written to a temporary file and renamed, so concurrent runs sharing the cache never see half an
entry. Runs whose result is not reproducible (the trace timed out, was killed, or mpdoctor failed) are not stored.
The directory gets its CACHEDIR.TAG and `.gitignore` only when mpdoctor creates it; an existing directory without
mpdoctor's tag (the project root, a user's folder) is never written into.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import errno
import hashlib
import json
import os
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mpdoctor._version import __version__
from mpdoctor.diagnostics import Diagnostic, FileError
from mpdoctor.reads import read_bytes
from mpdoctor.trace.backend_choice import chosen_backend

FORMAT = 2  # of an entry; a change of the layout below changes it
DIRECTORY_NAME = ".mpdoctor_cache"
ENV_VARIABLE = "MPDOCTOR_CACHE_DIR"
SMALL_FILE = 4 * 2**20  # artifacts up to this size are fingerprinted by content too, larger by size and mtime
_MAX_DIRECTORY_FILES = 10_000  # a "SavedModel" directory with more files is not fingerprinted (a miss each run)
ENTRY_LIMIT = 256 * 2**20  # an entry larger than this is a miss
# Settings that do not shape one file's result: they are left out of the key, so changing them keeps the cache.
_NOT_PER_FILE = {"jobs", "fail_on", "baseline", "exclude", "source", "cache_dir"}
# Environment the trace child reads (the Keras line, the backend, devices, imports), and what mpdoctor sets for it
# from these: keyed as the parent has them, not compared as the child saw them.
_ENVIRONMENT = (
    "TF_USE_LEGACY_KERAS",
    "KERAS_BACKEND",
    "KERAS_HOME",
    "CUDA_VISIBLE_DEVICES",
    "PYTHONPATH",
    "TF_CPP_MIN_LOG_LEVEL",
    "PYTHONDONTWRITEBYTECODE",
)
# Variables read by C++ (getenv), which the child cannot see read: keyed by prefix, whatever the run did.
_NATIVE_PREFIXES = ("TF_", "XLA_", "TPU_", "CUDA_", "NVIDIA_", "OMP_", "KMP_", "MKL_", "ONEDNN_", "DNNL_", "KERAS_")
# Set by the shell or mpdoctor per session, meaningless to a model: never compared (networkx-style enumerations).
_NOT_COMPARED = {"MPDOCTOR_TRACE_TOKEN", "OLDPWD", "SHLVL", "_", "PWD"}
_DISTRIBUTIONS = (
    *("tensorflow", "tensorflow-cpu", "keras", "tf-keras", "tensorflow-hub", "numpy", "ml-dtypes"),
    *("jax", "jaxlib", "torch"),  # Keras 3's other backends
)
_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by mpdoctor.\n"
    "# For information about cache directory tags, see:\n"
    "#\thttps://bford.info/cachedir/\n"
)


def cache_directory(option: Path | None, configured: Path | None, root: Path) -> Path:
    """--cache-dir, else MPDOCTOR_CACHE_DIR, else [tool.mpdoctor] cache-dir, else `.mpdoctor_cache` in the project
    root (the pyproject.toml's directory, or the current directory)."""
    if option is not None:
        return option
    if os.environ.get(ENV_VARIABLE):
        return Path(os.environ[ENV_VARIABLE])
    return configured if configured is not None else root / DIRECTORY_NAME


class NotCacheable(Exception):
    """Something the run read cannot be fingerprinted safely (a FIFO, a device, a file that grew past its bound):
    the result is neither stored nor replayed."""


# The static pass's diagnostics of the file now: what a cached fix must equal to be replayed.
Rederive = Callable[[], list[Diagnostic]]


class ResultCache:
    def __init__(self, directory: Path, config, trace) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self.hits: list[str] = []
        self.misses: list[str] = []
        self.problem: str | None = None  # why nothing could be written (the run goes on without storing)
        self._writable: bool | None = None  # the directory is mpdoctor's (created by it): known on the first store
        try:
            self._run_key: str | None = _digest(_run_parts(config, trace))
        except NotCacheable as exc:  # a --checkpoint or --sample that is a FIFO or a device
            self._run_key = None
            self.problem = f"not cacheable: {exc}"

    # ------------------------------------------------------------------------------------------------ keys

    def key(self, shown: str, path: Path, text: str, target, project) -> str:
        return _digest(
            {
                "run": self._run_key,
                "shown": shown,
                "path": os.path.abspath(path),
                "text": hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
                "target": target.to_json() if target is not None else None,
                "project": repr(project),  # dataclasses of strings and lines: their repr is stable
            }
        )

    # ------------------------------------------------------------------------------------------ look-ups

    def load(self, key: str, shown: str, rederive: Rederive | None = None):
        """(diagnostics, error, traces) stored under `key` if everything the run read is unchanged and every fix
        it holds is the one `rederive()` derives now (without `rederive`, an entry with fixes is a miss); else
        None."""
        result = None
        try:
            if self._run_key is not None:
                entry = json.loads(read_bytes(self._entry(key), ENTRY_LIMIT, "cache entry"))
                if entry["format"] == FORMAT and entry["key"] == key and _unchanged(entry, self.directory):
                    result = _decode_result(entry["result"])
                    if not _fixes_rederived(result[0], rederive):
                        result = None
        except Exception:  # missing, unreadable, corrupt, forged, or written by another version: a miss
            result = None
        with self._lock:
            (self.hits if result is not None else self.misses).append(shown)
        return result

    def holds(self, key: str) -> bool:
        """Whether an entry exists under `key` (it may still be stale: only `load` tells)."""
        return self._run_key is not None and self._entry(key).is_file()

    def store(self, key: str, diagnostics, error, traces, started: float, rederive: Rederive | None = None) -> None:
        """Keep a result computed from a run that started at `started` (time.time()); not when it cannot be
        reproduced, when something it read changed while it ran or cannot be fingerprinted, or when a fix in it
        is not what `rederive()` derives from the source."""
        if self._run_key is None or (error is not None and error.kind == "internal"):
            return
        try:
            entry = {"format": FORMAT, "key": key, **_dependencies(traces, self.directory, started)}
        except NotCacheable:
            return
        if not _fixes_rederived(diagnostics, rederive):
            return
        entry["result"] = _encode_result(diagnostics, error, traces)
        try:
            if self._prepare():
                _write_atomic(self._entry(key), json.dumps(entry, allow_nan=True))
        except OSError as exc:
            self.problem = f"cannot write the cache {self.directory}: {exc.strerror or exc}"

    def note(self) -> str:
        again = f"; checked again: {', '.join(self.misses)}" if self.misses else ""
        total = len(self.hits) + len(self.misses)
        text = f"cache: {len(self.hits)} of {total} file{'' if total == 1 else 's'} from {self.directory}{again}"
        return text + (f" ({self.problem})" if self.problem else "")

    def _entry(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def _prepare(self) -> bool:
        """Whether entries may be written: the directory is mpdoctor's. Created here when missing, whole, with
        CACHEDIR.TAG (backup tools skip it) and a .gitignore of `*` (git ignores it), as ruff's cache has them. An
        existing directory without mpdoctor's tag (`cache-dir = "."`, a link to a user's folder) is left alone."""
        with self._lock:
            if self._writable is None:
                self._writable = _own_directory(self.directory)
                if not self._writable:
                    self.problem = (
                        f"cannot write the cache {self.directory}: it exists and was not created by mpdoctor"
                        " (no CACHEDIR.TAG of mpdoctor's in it); results are not stored"
                    )
            return self._writable


def _own_directory(directory: Path) -> bool:
    """Create `directory` with its markers (atomically: made beside it, then renamed into place), or tell whether
    the existing one carries mpdoctor's tag. Raises OSError when it cannot be created."""
    if not os.path.lexists(directory):
        directory.parent.mkdir(parents=True, exist_ok=True)
        staged = tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".mpdoctor-tmp", dir=directory.parent)
        try:
            for name, text in (("CACHEDIR.TAG", _TAG), (".gitignore", "# Automatically created by mpdoctor.\n*\n")):
                with open(os.path.join(staged, name), "x", encoding="utf-8") as handle:
                    handle.write(text)
            if not os.path.lexists(directory):
                os.rename(staged, directory)
                return True
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):  # another run created it meanwhile: see below
                raise
        finally:
            if os.path.isdir(staged):
                for name in os.listdir(staged):
                    os.unlink(os.path.join(staged, name))
                os.rmdir(staged)
    try:
        return read_bytes(directory / "CACHEDIR.TAG", len(_TAG) + 1).decode("utf-8", "replace") == _TAG
    except OSError:
        return False


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _fixes_rederived(diagnostics: list[Diagnostic], rederive: Rederive | None) -> bool:
    """Whether every fix among `diagnostics` does what the static pass's fix of the same finding does with the source
    now (the same edits, applicability and kind; its description may be the trace's): a fix is code that --fix
    writes into the user's file and runs, never taken from the cache on trust."""
    fixed = [d for d in diagnostics if d.fix is not None or d.cell_fix is not None]
    if not fixed:
        return True
    if rederive is None:
        return False

    def place(d: Diagnostic) -> tuple:
        return (d.code, d.location.path, d.location.cell, d.location.line, d.location.column)

    def effect(d: Diagnostic) -> tuple:
        return tuple(None if f is None else dataclasses.replace(f, description="") for f in (d.fix, d.cell_fix))

    try:
        derived = {place(d): effect(d) for d in rederive()}
    except Exception:  # the static pass failed on it now: nothing to compare with
        return False
    return all(derived.get(place(d)) == effect(d) for d in fixed)


# ------------------------------------------------------------------------------------------------ fingerprints


def fingerprint(path: str) -> list:
    """What an artifact or module is on disk: [size, mtime_ns, sha256 of small files] per file; a directory (a
    SavedModel) file by file; a TensorFlow checkpoint prefix (`ckpt/model-5`, which is no file) by its
    `.index`/`.data-*` files and the directory's `checkpoint` state file; "missing" for nothing there. Raises
    NotCacheable for a FIFO, a device or a socket (reading one may never end)."""
    try:
        info = os.stat(path)
    except OSError:
        directory, base = os.path.split(path)
        try:
            names = sorted(n for n in os.listdir(directory or ".") if n.startswith(base + ".") or n == "checkpoint")
        except OSError:
            return ["missing"]
        return ["prefix", [[n, _file_print(os.path.join(directory, n))] for n in names]] if names else ["missing"]
    if stat.S_ISDIR(info.st_mode):
        files = []
        for root, dirs, names in os.walk(path):
            dirs.sort()
            files += [os.path.join(root, n) for n in sorted(names)]
            if len(files) > _MAX_DIRECTORY_FILES:
                return ["unknown", time.time()]  # never equal to a later fingerprint: a miss
        return ["directory", [[os.path.relpath(f, path), _file_print(f)] for f in files]]
    return _file_print(path, info)


def _file_print(path: str, info: os.stat_result | None = None) -> list:
    try:
        info = info or os.stat(path)
    except OSError:
        return ["missing"]
    if not stat.S_ISREG(info.st_mode):
        raise NotCacheable(f"{path} is not a regular file")
    digest = None
    if info.st_size <= SMALL_FILE:
        try:  # non-blocking, checked on the open file, bounded: it may have been swapped since the stat
            digest = hashlib.sha256(read_bytes(path, SMALL_FILE, "cached input")).hexdigest()
        except FileNotFoundError:
            return ["missing"]
        except OSError as exc:
            raise NotCacheable(f"{path}: {exc.strerror or exc}") from None
    return [info.st_size, info.st_mtime_ns, digest]


def probe_print(path: str) -> list:
    """What a test of a path's existence (os.path.exists, isfile, getsize...) can tell: its kind through symlinks
    and of the link itself, and a regular file's size and mtime."""
    try:
        link = _kind(os.lstat(path).st_mode)
        info = os.stat(path)
    except OSError:
        return ["missing"] if "link" not in locals() else ["dangling"]
    kind = _kind(info.st_mode)
    return [link, kind, info.st_size, info.st_mtime_ns] if kind == "file" else [link, kind]


def listing_print(path: str, cache_directory: Path) -> list:
    """A listed directory's names (not their contents), without the cache directory itself (created after the
    run that listed its parent)."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return ["missing"]
    own = os.path.abspath(cache_directory)
    names = [n for n in names if os.path.join(os.path.abspath(path), n) != own]
    return ["listing", hashlib.sha256("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()]


def _kind(mode: int) -> str:
    return (
        "file"
        if stat.S_ISREG(mode)
        else "directory"
        if stat.S_ISDIR(mode)
        else "link"
        if stat.S_ISLNK(mode)
        else "other"
    )


def environment_print(name: str) -> str | None:
    """The digest the trace child records for a variable's value (mpdoctor.trace.child.inputs)."""
    value = os.environ.get(name)
    return None if value is None else hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()


def _dependencies(traces, cache_directory: Path, started: float) -> dict[str, Any]:
    """The entry's record of what the runs read, fingerprinted now. Raises NotCacheable when one of them is unknown,
    cannot be fingerprinted, or changed after `started` (it may have changed while the trace read it)."""
    files: set[str] = set()
    probed: set[str] = set()
    listed: set[str] = set()
    environment: dict[str, str | None] = {}
    for summary in traces:
        if summary.status in ("failed", "internal") or summary.inputs is None or summary.lookups is None:
            raise NotCacheable("what the run read is unknown")
        files.update(summary.inputs)
        probed.update(summary.lookups.probed)
        listed.update(summary.lookups.listed)
        environment.update(summary.lookups.environment)
    dependencies: dict[str, list[list[Any]]] = {
        "inputs": [[path, fingerprint(path)] for path in sorted(files)],
        "probed": [[path, probe_print(path)] for path in sorted(probed)],
        "listed": [[path, listing_print(path, cache_directory)] for path in sorted(listed)],
        "environment": [[name, value] for name, value in sorted(environment.items()) if _compared(name)],
    }
    prints = [print_ for _path, print_ in dependencies["inputs"]]
    prints += [print_[2:] + [None] for _path, print_ in dependencies["probed"] if len(print_) == 4]
    if any(_modified_since(print_, started) for print_ in prints):
        raise NotCacheable("an input changed while the run read it")
    return dependencies


def _compared(name: str) -> bool:
    """Whether a variable the run read is compared by its value (not when the key holds it already)."""
    return name not in _ENVIRONMENT and name not in _NOT_COMPARED and not name.startswith(_NATIVE_PREFIXES)


def _unchanged(entry: dict, cache_directory: Path) -> bool:
    """Whether everything the entry's run read is as it was (a forged entry's shapes raise: a miss)."""
    checks: tuple[tuple[str, Callable[[str], Any]], ...] = (
        ("inputs", fingerprint),
        ("probed", probe_print),
        ("listed", lambda path: listing_print(path, cache_directory)),
        ("environment", environment_print),
    )
    for field, now in checks:
        for item in entry[field]:
            if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str):
                raise ValueError(f"malformed {field}")
            if now(item[0]) != item[1]:
                return False
    return True


def _modified_since(print_, started: float) -> bool:
    """Whether a fingerprint holds a file modified after `started` (it may have changed while the trace read it)."""
    if isinstance(print_, list) and len(print_) == 3 and isinstance(print_[1], int):
        return print_[1] >= int(started * 1e9)
    if isinstance(print_, list) and len(print_) == 2 and isinstance(print_[1], list):
        return any(_modified_since(inner, started) for _name, inner in print_[1])
    return False


# ------------------------------------------------------------------------------------------------ the run's key


def _run_parts(config, trace) -> dict:
    """What every file's key shares: versions, the environment, the configuration and the trace options."""
    import importlib.metadata

    versions: dict[str, str | None] = {}
    for name in _DISTRIBUTIONS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    settings = {
        f.name: _plain(getattr(config, f.name)) for f in dataclasses.fields(config) if f.name not in _NOT_PER_FILE
    }
    options = {f.name: _plain(getattr(trace, f.name)) for f in dataclasses.fields(trace) if f.name != "jobs"}
    options["checkpoints"] = [[os.path.abspath(c), fingerprint(c)] for c in trace.checkpoints]
    sample = trace.numerics.sample if trace.numerics is not None else None
    return {
        "format": FORMAT,
        "mpdoctor": [__version__, _own_source()],
        "python": [sys.version, sys.executable],
        "versions": versions,
        "environment": {name: os.environ.get(name) for name in _ENVIRONMENT},
        "native": sorted([n, environment_print(n)] for n in os.environ if n.startswith(_NATIVE_PREFIXES)),
        "cwd": os.getcwd(),  # display paths and messages are relative to it
        "config": settings,
        # KERAS_BACKEND, else the configured one, else keras.json's: the backend the trace runs on, however chosen
        "keras_backend": chosen_backend(config.keras_backend).name,
        "trace": options,
        "sample": fingerprint(sample) if sample else None,
    }


def _own_source() -> str:
    """mpdoctor's own modules by size and mtime: a development checkout changes without a version bump."""
    package = os.path.dirname(os.path.abspath(__file__))
    parts = []
    for root, dirs, names in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith((".py", ".toml")):
                info = os.stat(os.path.join(root, name))
                parts.append(f"{os.path.relpath(os.path.join(root, name), package)}:{info.st_size}:{info.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _plain(value):
    """A JSON value for `value` that is the same in every run (sets sorted: their order varies between runs)."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return sorted([str(k), _plain(v)] for k, v in value.items())
    if isinstance(value, (set, frozenset)):
        return sorted(repr(_plain(v)) for v in value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode("utf-8", "surrogatepass")).hexdigest()


# ------------------------------------------------------------------------------------------------ entries


def _encode_result(diagnostics: list[Diagnostic], error: FileError | None, traces: list) -> dict:
    from mpdoctor.facts import codec

    return {
        "diagnostics": [_encode(d) for d in diagnostics],
        "error": _encode(error) if error is not None else None,
        "traces": [codec.to_json(t) for t in traces],
        "inputs": [t.inputs for t in traces],
        "lookups": [codec.to_json(t.lookups) for t in traces],
    }


def _decode_result(data: dict):
    """The stored result, checked against the result types' annotations (mpdoctor.facts.codec): a forged or
    malformed entry raises SchemaError, a miss."""
    from mpdoctor.facts import codec
    from mpdoctor.facts.schema import Lookups, TraceSummary

    traces = [TraceSummary.from_json(item) for item in data["traces"]]
    inputs = codec.from_json(list[list[str]], data["inputs"])
    for summary, read, looked in zip(traces, inputs, codec.from_json(list[Lookups], data["lookups"]), strict=True):
        summary.inputs, summary.lookups = read, looked
    error = None if data["error"] is None else codec.from_json(FileError, data["error"])
    return codec.from_json(list[Diagnostic], data["diagnostics"]), error, traces


def _encode(value):
    """The frozen result types (mpdoctor.diagnostics) as JSON, every field kept."""
    if dataclasses.is_dataclass(value):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    return value
