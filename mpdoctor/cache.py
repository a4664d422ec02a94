"""The result cache (`.mpdoctor_cache/`): one file's whole result (static and trace diagnostics, fixes included,
its error and its trace summary), replayed when nothing it depends on changed.

The unit is the per-file result of both passes: the trace is the expensive part, and the static findings are
merged with the trace's verdicts, so caching either pass alone would replay nothing useful.

An entry is found by a key over what is known before the run: the file's text, its resolved target and project
policy contexts, the configuration that shapes per-file results, the trace options (--checkpoint and --sample files
by fingerprint), mpdoctor's version and source, the installed TensorFlow/Keras/tf_keras/tensorflow-hub versions
(read with importlib.metadata, never by importing them) and the environment variables the trace reads. The entry
then lists what the run read (local modules, opened files, restored checkpoints, loaded SavedModels: recorded by the
trace child) with their fingerprints; any that differ now make it a miss. Anything unreadable is a miss, never an
error; entries are written to a temporary file and renamed, so concurrent runs sharing the cache never see half an
entry. Runs whose result is not reproducible (the trace timed out, was killed, or mpdoctor failed) are not stored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import hashlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from mpdoctor._version import __version__
from mpdoctor.diagnostics import (
    Confidence,
    Diagnostic,
    DiagnosticContext,
    Edit,
    FileError,
    Fix,
    Location,
    Severity,
)

FORMAT = 1  # of an entry; a change of the layout below changes it
DIRECTORY_NAME = ".mpdoctor_cache"
ENV_VARIABLE = "MPDOCTOR_CACHE_DIR"
SMALL_FILE = 4 * 2**20  # artifacts up to this size are fingerprinted by content too, larger by size and mtime
_MAX_DIRECTORY_FILES = 10_000  # a "SavedModel" directory with more files is not fingerprinted (a miss each run)
# Settings that do not shape one file's result: they are left out of the key, so changing them keeps the cache.
_NOT_PER_FILE = {"jobs", "fail_on", "baseline", "exclude", "source", "cache_dir"}
# Environment the trace child reads (the Keras line, the backend, devices, imports).
_ENVIRONMENT = ("TF_USE_LEGACY_KERAS", "KERAS_BACKEND", "KERAS_HOME", "CUDA_VISIBLE_DEVICES", "PYTHONPATH")
_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "keras", "tf-keras", "tensorflow-hub", "numpy", "ml-dtypes")
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


class ResultCache:
    def __init__(self, directory: Path, config, trace) -> None:
        self.directory = directory
        self._run_key = _digest(_run_parts(config, trace))
        self._lock = threading.Lock()
        self.hits: list[str] = []
        self.misses: list[str] = []
        self.problem: str | None = None  # why nothing could be written (the run goes on without storing)

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

    def load(self, key: str, shown: str):
        """(diagnostics, error, traces) stored under `key` if everything the run read is unchanged, else None."""
        result = None
        try:
            with open(self._entry(key), encoding="utf-8") as handle:
                entry = json.load(handle)
            if entry["format"] == FORMAT and entry["key"] == key and _unchanged(entry["inputs"]):
                result = _decode_result(entry["result"])
        except Exception:  # missing, unreadable, corrupt, or written by another version: a miss
            result = None
        with self._lock:
            (self.hits if result is not None else self.misses).append(shown)
        return result

    def holds(self, key: str) -> bool:
        """Whether an entry exists under `key` (it may still be stale: only `load` tells)."""
        return self._entry(key).is_file()

    def store(self, key: str, diagnostics, error, traces, started: float) -> None:
        """Keep a result computed from a run that started at `started` (time.time()); not when it cannot be
        reproduced, or when something it read changed while it ran."""
        if error is not None and error.kind == "internal":
            return
        inputs: set[str] = set()
        for summary in traces:
            if summary.status in ("failed", "internal") or summary.inputs is None:
                return
            inputs.update(summary.inputs)
        fingerprints = [[path, fingerprint(path)] for path in sorted(inputs)]
        if any(_modified_since(print_, started) for _path, print_ in fingerprints):
            return
        entry = {
            "format": FORMAT,
            "key": key,
            "inputs": fingerprints,
            "result": _encode_result(diagnostics, error, traces),
        }
        try:
            self._prepare()
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

    def _prepare(self) -> None:
        """The directory, with CACHEDIR.TAG (backup tools skip it) and a .gitignore of `*` (git ignores it), as
        ruff's cache has them."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for name, text in (("CACHEDIR.TAG", _TAG), (".gitignore", "# Automatically created by mpdoctor.\n*\n")):
            if not (self.directory / name).exists():
                _write_atomic(self.directory / name, text)


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


# ------------------------------------------------------------------------------------------------ fingerprints


def fingerprint(path: str) -> list:
    """What an artifact or module is on disk: [size, mtime_ns, sha256 of small files] per file; a directory (a
    SavedModel) file by file; a TensorFlow checkpoint prefix (`ckpt/model-5`, which is no file) by its
    `.index`/`.data-*` files and the directory's `checkpoint` state file; "missing" for nothing there."""
    try:
        info = os.stat(path)
    except OSError:
        directory, base = os.path.split(path)
        try:
            names = sorted(n for n in os.listdir(directory or ".") if n.startswith(base + ".") or n == "checkpoint")
        except OSError:
            return ["missing"]
        return ["prefix", [[n, _file_print(os.path.join(directory, n))] for n in names]] if names else ["missing"]
    if os.path.isdir(path):
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
        digest = None
        if info.st_size <= SMALL_FILE:
            with open(path, "rb") as handle:
                digest = hashlib.sha256(handle.read()).hexdigest()
        return [info.st_size, info.st_mtime_ns, digest]
    except OSError:
        return ["missing"]


def _unchanged(inputs: list) -> bool:
    return all(fingerprint(path) == print_ for path, print_ in inputs)


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

    versions = {}
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
        "cwd": os.getcwd(),  # display paths and messages are relative to it
        "config": settings,
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
    }


def _decode_result(data: dict):
    from mpdoctor.facts.schema import TraceSummary

    traces = [TraceSummary.from_json(item) for item in data["traces"]]
    for summary, inputs in zip(traces, data["inputs"], strict=True):
        summary.inputs = inputs
    error = _decode(FileError, data["error"]) if data["error"] is not None else None
    return [_decode(Diagnostic, d) for d in data["diagnostics"]], error, traces


def _encode(value):
    """The frozen result types (mpdoctor.diagnostics) as JSON, every field kept."""
    if dataclasses.is_dataclass(value):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    return value


_NESTED = {
    (Diagnostic, "location"): Location,
    (Diagnostic, "fix"): Fix,
    (Diagnostic, "cell_fix"): Fix,
    (Diagnostic, "context"): DiagnosticContext,
    (Diagnostic, "severity"): Severity,
    (Diagnostic, "confidence"): Confidence,
}


def _decode(cls, data: dict):
    values = {}
    for f in dataclasses.fields(cls):
        value = data[f.name]
        nested = _NESTED.get((cls, f.name))
        if value is None:
            pass
        elif nested in (Severity, Confidence):
            value = nested(value)
        elif nested is not None:
            value = _decode(nested, value)
        elif cls is Fix and f.name == "edits":
            value = tuple(_decode(Edit, e) for e in value)
        elif isinstance(value, list):
            value = tuple(value)
        values[f.name] = value
    return cls(**values)
