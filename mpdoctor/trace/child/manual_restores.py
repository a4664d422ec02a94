"""Hand-written restores (trace child): a script that reads checkpoint values itself (`tf.train.load_checkpoint`
/ `CheckpointReader.get_tensor`, `tf.train.load_variable`, `np.load`, `h5py.File`) and assigns them into its
variables (`var.assign(tf.cast(value, var.dtype))`, `layer.set_weights(...)`): the common workaround for a
float32 checkpoint that will not restore into float16 variables. Such a restore is recorded like the library's
(a `Restore` entry at the line that opened the file), then range-audited (MP302/MP303) and matched (MP304).

How values are followed: every value read from such a file is kept (a reference to the array the script got,
and when it was read), and every eager `assign` made from the script's own code (within a few library frames of it:
`set_weights`, `assign`) is snapshotted. After the run each assigned value is paired with the most recent value
read before it that it equals once cast to the variable's dtype (two files holding the same weights, restored into
two models one after the other, each pair with their own file); the pairs say which variable (hence which layer,
and its compute dtype) each checkpoint value went to. Reads inside a library restore (`tf.train.Checkpoint.read`,
`load_weights`: the recorder's active sinks) are the library's, not the script's.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys

from mpdoctor.facts.schema import Restore, Unmatched
from mpdoctor.trace.child import backends
from mpdoctor.trace.child.hooks import Recorder, wrap_method

_ASSIGN_DEPTH = 12  # library frames allowed between the script's line and the variable's assign
_MAX_NAMES = 50
# Checkpoint entries that are bookkeeping, not model weights: never "unused values" of a hand-written restore.
_BOOKKEEPING = ("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter", "optimizer", "OPTIMIZER_SLOT", "global_step")


class _Source:
    """One file the script opened to read values from."""

    def __init__(self, entry: Restore, fmt: str, keys) -> None:
        self.entry = entry
        self.format = fmt
        self.keys = keys  # () -> every key of the file (computed after the run, only when needed)
        self.reads: dict[str, object] = {}  # key -> array the script got
        self.read_at: dict[str, int] = {}  # key -> when it was last read (the tracker's clock)


class ManualRestores:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.sources: dict[str, _Source] = {}  # by path
        self.handles: dict[int, _Source] = {}  # id(reader / NpzFile) -> source
        self.handle_objects: list = []  # keep them alive: ids stay unique
        self.assigns: list[tuple[int, object, object]] = []  # (when, variable, value snapshot)
        self.clock = itertools.count()

    # -------------------------------------------------------------------------------------------- recording

    def in_library_restore(self) -> bool:
        return id(self.recorder.restores) in self.recorder.active_sinks

    def open(self, api: str, path, fmt: str, handle, keys) -> None:
        text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
        if text is None or self.in_library_restore():
            return
        source = self.sources.get(os.path.abspath(text))
        if source is None:
            entry = Restore(api, text, self.recorder.location(3))
            source = self.sources[os.path.abspath(text)] = _Source(entry, fmt, keys)
        if handle is not None:
            self.handles[id(handle)] = source
            self.handle_objects.append(handle)

    def read(self, handle, key, value) -> None:
        source = self.handles.get(id(handle))
        if source is not None and not self.in_library_restore() and isinstance(key, str):
            self.note(source, key, value)

    def note(self, source: _Source, key: str, value) -> None:
        source.reads.setdefault(key, value)
        source.read_at[key] = next(self.clock)

    def assigned(self, variable) -> None:
        if not self.sources or not _from_script(self.recorder.user_file):
            return
        try:
            import tensorflow as tf

            if not tf.executing_eagerly():
                return
            self.assigns.append((next(self.clock), variable, variable.numpy().copy()))
        except Exception:
            return

    # -------------------------------------------------------------------------------------------- after the run

    def resolve(self) -> dict[int, dict[str, object]]:
        """Pair assigned values with read values. A file whose values went into variables becomes a restore of
        the run (a file only inspected, `tf.train.list_variables`, does not); its `unmatched` is set. Returns, per
        restore entry (by id), {checkpoint key: variable} for the range audit."""
        resolved: dict[int, dict[str, object]] = {}
        paired = _pair(list(self.sources.values()), self.assigns)
        for source in self.sources.values():
            pairs = paired.get(id(source))
            if not pairs:
                continue
            self.recorder.restores.append(source.entry)
            resolved[id(source.entry)] = pairs
            try:
                source.entry.unmatched = _unmatched(source, pairs, self.recorder.models)
            except Exception as exc:
                source.entry.unmatched_error = f"{type(exc).__name__}: {exc}"
        return resolved

    def values(self, resolved: dict[int, dict[str, object]]) -> dict[int, tuple[str, dict[str, object]]]:
        """{id(restore): (format, {key: array})} of the values that went into variables: what the range audit of a
        hand-written restore reads (never the whole file: values only inspected are not restored)."""
        return {
            id(source.entry): (source.format, {key: source.reads[key] for key in resolved[id(source.entry)]})
            for source in self.sources.values()
            if id(source.entry) in resolved
        }


def _from_script(user_file: str) -> bool:
    """Whether the assign in progress was made by the script's own code: its first frame outside the libraries
    (TensorFlow, Keras, NumPy, mpdoctor) is in the user's file, within a few frames (not a Keras training step)."""
    from mpdoctor.trace.child.hooks import _is_library

    frame = sys._getframe(3)
    for _ in range(_ASSIGN_DEPTH):
        if frame is None:
            return False
        filename = frame.f_code.co_filename
        if filename == user_file or os.path.realpath(filename) == user_file:
            return True
        if not _is_library(filename):
            return False
        frame = frame.f_back
    return False


def _pair(sources: list[_Source], assigns: list[tuple[int, object, object]]) -> dict[int, dict[str, object]]:
    """id(source) -> {key: variable}: each assigned value goes with the most recent value read before it that equals
    it once cast to the variable's dtype (a key keeps the first variable it went into)."""
    reads = sorted(
        ((when, source, key) for source in sources for key, when in source.read_at.items()),
        key=lambda read: read[0],
        reverse=True,
    )
    pairs: dict[int, dict[str, object]] = {}
    for assigned_at, variable, value in assigns:
        for when, source, key in reads:
            if when < assigned_at and _equal_when_cast(source.reads[key], value):
                pairs.setdefault(id(source), {}).setdefault(key, variable)
                break
    return pairs


def _equal_when_cast(array, value) -> bool:
    import numpy as np

    try:
        candidate = np.asarray(array)
        if candidate.size != value.size:
            return False
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # 1e5 becomes inf in float16, as assigned
            cast = candidate.astype(value.dtype).reshape(value.shape)
    except (TypeError, ValueError):
        return False
    return bool(np.array_equal(cast, value, equal_nan=value.dtype.kind == "f"))


def _unmatched(source: _Source, pairs: dict[str, object], models) -> Unmatched:
    """Variables of the models that received values from this file but got none, and values of the file (model
    weights, not bookkeeping) that went into no variable."""
    assigned = {key for variable in pairs.values() for key in _ids(variable)}
    targets = _receiving_models(pairs.values(), models)
    missing = []
    for model in targets:
        for variable in model.weights:
            if not set(_ids(variable)) & assigned and "seed_generator" not in _name(variable):
                missing.append(_name(variable))
    unused = [key for key in sorted(source.keys()) if key not in pairs and not any(m in key for m in _BOOKKEEPING)]
    return Unmatched("values", False, len(unused), unused[:_MAX_NAMES], len(missing), missing[:_MAX_NAMES])


def _ids(variable) -> list[int]:
    from mpdoctor.trace.child.audits import _variable_ids

    return _variable_ids(variable)


def _name(variable) -> str:
    name = getattr(variable, "path", None) or getattr(variable, "name", None) or type(variable).__name__
    return str(name).removesuffix(":0")


def _receiving_models(variables, models) -> list:
    """The outermost models holding any of the variables."""
    wanted = {key for variable in variables for key in _ids(variable)}
    holding = []
    for model in models:
        try:
            ids = {key for variable in model.weights for key in _ids(variable)}
        except Exception:
            continue
        if ids & wanted:
            holding.append((model, ids))
    return [model for model, ids in holding if not any(ids < other for _, other in holding)]


# ------------------------------------------------------------------------------------------------ installation


def install(recorder: Recorder, hooks) -> ManualRestores:
    """Hook the readers and variable assigns; the function replacements go into `hooks` (patched by the caller)."""
    tracker = ManualRestores(recorder)
    recorder.manual_restores = tracker
    if backends.tensorflow():
        _install_tensorflow(tracker, hooks)
    _install_numpy(tracker, hooks)
    if "h5py" in sys.modules or _importable("h5py"):
        _install_h5py(tracker)
    return tracker


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _install_tensorflow(tracker: ManualRestores, hooks) -> None:
    from tensorflow.python.ops import resource_variable_ops
    from tensorflow.python.training import py_checkpoint_reader

    original = py_checkpoint_reader.NewCheckpointReader
    recorder = tracker.recorder

    @functools.wraps(original)
    def new_reader(filepattern):
        filepattern = recorder.load_path(filepattern)
        reader = original(filepattern)
        tracker.open(
            "tf.train.load_checkpoint", filepattern, "tf", reader, lambda: list(reader.get_variable_to_shape_map())
        )
        return reader

    hooks.replacements[id(original)] = new_reader
    reader_class = py_checkpoint_reader.CheckpointReader
    get_tensor = reader_class.get_tensor

    def recording_get_tensor(self, tensor_str):
        value = get_tensor(self, tensor_str)
        tracker.read(self, tensor_str if isinstance(tensor_str, str) else str(tensor_str), value)
        return value

    reader_class.get_tensor = recording_get_tensor
    # TensorFlow's weak_tensor_ops replaces `ResourceVariable.assign` on import by a wrapper of the base class's
    # function it captured then: wrapping the base class alone never sees a ResourceVariable's assign. Each class
    # that defines its own `assign` is wrapped (the wrappers do not call each other: one record per assign).
    for variable_class in (resource_variable_ops.BaseResourceVariable, resource_variable_ops.ResourceVariable):
        wrap_method(variable_class, "assign", _assign_recorder(tracker))


def _assign_recorder(tracker: ManualRestores):
    def make(original):
        def assign(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            tracker.assigned(self)
            return result

        return assign

    return make


def _install_numpy(tracker: ManualRestores, hooks) -> None:
    import numpy as np

    original = np.load
    npz_class = np.lib.npyio.NpzFile

    @functools.wraps(original)
    def load(file, *args, **kwargs):
        value = original(file, *args, **kwargs)
        path = os.fspath(file) if isinstance(file, (str, os.PathLike)) else None
        if path is not None and _called_from(tracker.recorder.user_file):
            if isinstance(value, npz_class):
                tracker.open("np.load", path, "npz", value, lambda: list(value.files))
            elif isinstance(value, np.ndarray):
                tracker.open("np.load", path, "npy", None, lambda: [os.path.basename(path)])
                source = tracker.sources.get(os.path.abspath(path))
                if source is not None:
                    tracker.note(source, os.path.basename(path), value)
        return value

    hooks.replacements[id(original)] = load

    def make(original_getitem):
        def __getitem__(self, key):
            value = original_getitem(self, key)
            tracker.read(self, key, value)
            return value

        return __getitem__

    wrap_method(npz_class, "__getitem__", make)


def _install_h5py(tracker: ManualRestores) -> None:
    import h5py

    def make_init(original):
        def __init__(self, name, *args, **kwargs):
            original(self, name, *args, **kwargs)
            mode = args[0] if args else kwargs.get("mode", "r")
            if mode == "r" and isinstance(name, (str, os.PathLike)) and _called_from(tracker.recorder.user_file):
                tracker.open("h5py.File", os.fspath(name), "h5", None, lambda: _h5_keys(os.fspath(name)))

        return __init__

    wrap_method(h5py.File, "__init__", make_init)

    def make_read(original):
        def read(self, *args, **kwargs):
            value = original(self, *args, **kwargs)
            try:
                source = tracker.sources.get(os.path.abspath(self.file.filename))
            except Exception:
                source = None
            if source is not None and source.format == "h5" and not tracker.in_library_restore():
                tracker.note(source, self.name.lstrip("/"), value)
            return value

        return read

    for method in ("__getitem__", "__array__"):
        wrap_method(h5py.Dataset, method, make_read)


def _h5_keys(path: str) -> list[str]:
    import h5py

    keys = []
    with h5py.File(path, "r") as handle:
        handle.visititems(lambda name, item: keys.append(name) if isinstance(item, h5py.Dataset) else None)
    return keys


def _called_from(user_file: str) -> bool:
    """Whether the hooked call's direct caller (skipping mpdoctor's wrappers) is the user's file."""
    frame = sys._getframe(2)
    here = os.path.dirname(os.path.abspath(__file__))
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == here:
        frame = frame.f_back
    if frame is None:
        return False
    filename = frame.f_code.co_filename
    return filename == user_file or os.path.realpath(filename) == user_file
