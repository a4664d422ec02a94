"""Hooks installed in the trace child before the user's file is imported. They record, with the user's source
location, every policy change, layer creation, SavedModel load, checkpoint restore and model export.

Runs only in the child (imports TensorFlow and Keras). Every wrapper calls the original and re-raises its
exceptions unchanged: the user's code must behave exactly as without mpdoctor, with one exception: saves through
the known APIs (model.save / save_weights / export, tf.saved_model.save, tf.train.Checkpoint.save / write,
CheckpointManager, TF1 Saver.save) write into the trace's scratch directory instead of the user's tree, and loads
of a path saved earlier in the same run read it back from there (Recorder.save_path / load_path).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import os
import sys
import types
from collections.abc import Callable
from typing import Any

from mpdoctor.facts.dtypes import dtype_name
from mpdoctor.facts.keras_semantics import autocast_flag, layer_policy
from mpdoctor.facts.schema import (
    ErrorRecord,
    Export,
    LayerRecord,
    PolicyEvent,
    Restore,
    SavedModelLoad,
    SourceRef,
)

_HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the mpdoctor package


class Recorder:
    def __init__(self, user_file: str, scratch: str | None = None) -> None:
        self.user_file = os.path.realpath(user_file)
        self.scratch = scratch  # saves go here; None: saves are not redirected
        self.redirects: dict[str, str] = {}  # absolute path the code asked to write -> where it was written
        self.asked: dict[str, str] = {}  # where it was written -> the path as the code gave it (for messages)
        self._saves = itertools.count()
        self.policy_events: list[PolicyEvent] = []
        self.layers: dict[str, LayerRecord] = {}
        self.layer_objects: list[Any] = []  # strong refs keep ids unique while we run
        self.models: list[Any] = []
        self.analysed_models: list[Any] = []
        self.savedmodel_loads: list[SavedModelLoad] = []
        self.restores: list[Restore] = []
        self.live_restores: list[tuple[Restore, Any, Any]] = []  # (entry, receiver, result): matched after the call
        self.active_sinks: set[int] = set()  # sinks with a recorded call in progress (see _method_recorder)
        self.exports: list[Export] = []
        self.extra_checkpoints: list[str] = []  # --checkpoint paths, audited like recorded restores

    # ------------------------------------------------------------------ locations

    def location(self, skip: int = 2) -> SourceRef | None:
        """The deepest frame in the user's file, else the first frame outside mpdoctor and site-packages."""
        frame = sys._getframe(skip)
        fallback = None
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename == self.user_file or os.path.realpath(filename) == self.user_file:
                return SourceRef(self.user_file, frame.f_lineno)
            if fallback is None and not _is_library(filename):
                fallback = SourceRef(os.path.realpath(filename), frame.f_lineno)
            frame = frame.f_back
        return fallback

    # ------------------------------------------------------------------ saves outside the user's tree

    def save_path(self, path: Any) -> Any:
        """Where a save really writes: a fresh directory in the scratch directory with the same base name (the
        extension picks the format). Remote URLs are left alone."""
        text = _safe_str(path)
        if self.scratch is None or text is None or "://" in text:
            return path
        original = os.path.abspath(text)
        if original.startswith(self.scratch + os.sep):
            return path  # already redirected (Checkpoint.save writes through write, a manager through save)
        target = os.path.join(self.scratch, str(next(self._saves)), os.path.basename(original) or "saved")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        self.redirects[original] = target
        self.asked[target] = text
        return target

    def load_path(self, path: Any) -> Any:
        """A path saved earlier in this run (or a file inside it, a checkpoint `prefix-1`, its directory) is read
        from where it was really written."""
        text = _safe_str(path)
        if not self.redirects or text is None or "://" in text:
            return path
        original = os.path.abspath(text)
        for saved, target in reversed(self.redirects.items()):
            if original == saved or (original.startswith(saved) and original[len(saved)] in "-." + os.sep):
                return target + original[len(saved) :]
            if original == os.path.dirname(saved):
                return os.path.dirname(target)
        return path


def _rewrite(args: tuple, kwargs: dict, position: int, keyword: str, rewrite: Callable) -> tuple[tuple, dict]:
    """The call's arguments with its path argument (at `position`, or the keyword) passed through `rewrite`."""
    if len(args) > position:
        return (*args[:position], rewrite(args[position]), *args[position + 1 :]), kwargs
    if keyword in kwargs:
        return args, {**kwargs, keyword: rewrite(kwargs[keyword])}
    return args, kwargs


def _is_library(filename: str) -> bool:
    return (
        filename.startswith(_HERE)
        or "site-packages" in filename
        or "dist-packages" in filename
        or filename.startswith("<")
        or os.sep + "lib" + os.sep + "python" in filename
    )


# ---------------------------------------------------------------------- patching


def wrap_method(cls: type, name: str, make_wrapper: Callable[[Callable], Callable]) -> None:
    original = cls.__dict__.get(name)
    if original is None or getattr(original, "__mpdoctor_wrapped__", False):
        return
    wrapper = functools.wraps(original)(make_wrapper(original))
    wrapper.__mpdoctor_wrapped__ = True  # type: ignore[attr-defined]
    # Keras 3 reads constructor arguments with getfullargspec, which does not follow __wrapped__.
    with contextlib.suppress(TypeError, ValueError):
        wrapper.__signature__ = inspect.signature(original)  # type: ignore[attr-defined]
    setattr(cls, name, wrapper)


def patch_functions(replacements: dict[int, Callable]) -> None:
    """Replace functions by id in every loaded module's namespace: `keras.mixed_precision.set_global_policy`,
    `keras.config.set_dtype_policy` and `tf.keras.mixed_precision.set_global_policy` are one function object
    re-exported from several modules, and users may have imported it under any of them."""
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(module, types.ModuleType) or not isinstance(namespace, dict):
            continue
        for attr, value in list(namespace.items()):
            wrapper = replacements.get(id(value))
            if wrapper is not None:
                namespace[attr] = wrapper


class Hooks:
    """Collects the function replacements of one installation and builds the recorders the Keras adapters wrap
    their APIs with (mpdoctor/trace/child/keras_adapter.py)."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.replacements: dict[int, Callable] = {}

    def function(self, original: Callable, on_call: Callable, path: tuple | None = None) -> None:
        """Replace a module-level function by a recording wrapper (in every module that re-exports it).
        path: (position, keyword, "save" | "load") of a path argument to redirect."""
        recorder = self.recorder

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            where = recorder.location()
            if path is not None:
                position, keyword, kind = path
                args, kwargs = _rewrite(
                    args, kwargs, position, keyword, recorder.save_path if kind == "save" else recorder.load_path
                )
            try:
                result = original(*args, **kwargs)
            except BaseException as exc:
                on_call(args, kwargs, where, exc)
                raise
            on_call(args, kwargs, where, None)
            return result

        self.replacements[id(original)] = wrapper

    def record_policy(self, api: str) -> Callable:
        recorder = self.recorder

        def on_call(args, kwargs, where, exc):
            value = args[0] if args else next(iter(kwargs.values()), None)
            recorder.policy_events.append(PolicyEvent(dtype_name(value), api, where, len(recorder.layers)))

        return on_call

    def record_restore(self, api: str, path_of: Callable) -> Callable:
        recorder = self.recorder

        def on_call(args, kwargs, where, exc):
            recorder.restores.append(Restore(api, _safe_str(path_of(args, kwargs)), where, _error(exc)))

        return on_call

    def record_export(self, api: str, path_of: Callable) -> Callable:
        recorder = self.recorder

        def on_call(args, kwargs, where, exc):
            written = _safe_str(path_of(args, kwargs))
            asked = next((saved for saved, target in recorder.redirects.items() if target == written), written)
            recorder.exports.append(Export(api, asked, written, where, _error(exc)))

        return on_call

    def install_tensorflow(self) -> None:
        """TensorFlow's own SavedModel and checkpoint APIs."""
        import tensorflow as tf

        recorder = self.recorder
        self.function(
            tf.saved_model.load, _record_savedmodel_function(recorder, "tf.saved_model.load"), (0, "export_dir", "load")
        )
        self.function(
            tf.saved_model.save,
            self.record_export("tf.saved_model.save", lambda a, k: second(a, k, "export_dir")),
            (1, "export_dir", "save"),
        )
        self.function(tf.train.latest_checkpoint, lambda *_: None, (0, "checkpoint_dir", "load"))
        checkpoint = tf.train.Checkpoint
        for method in ("restore", "read"):
            wrap_method(
                checkpoint,
                method,
                _method_recorder(
                    recorder,
                    recorder.restores,
                    f"tf.train.Checkpoint.{method}",
                    lambda a, k: a[1] if len(a) > 1 else k.get("save_path"),
                    (1, "save_path", "load"),
                ),
            )
        for method in ("save", "write"):
            wrap_method(checkpoint, method, _redirecting(recorder, 1, "file_prefix"))
        wrap_method(tf.train.CheckpointManager, "__init__", _redirecting(recorder, 2, "directory"))
        wrap_method(tf.compat.v1.train.Saver, "__init__", _creation_site_recorder(recorder))
        wrap_method(tf.compat.v1.train.Saver, "save", _redirecting(recorder, 2, "save_path"))
        wrap_method(
            tf.compat.v1.train.Saver,
            "restore",
            _method_recorder(
                recorder,
                recorder.restores,
                "tf.compat.v1.train.Saver.restore",
                lambda a, k: a[2] if len(a) > 2 else k.get("save_path"),
                (2, "save_path", "load"),
            ),
        )

    def model_io(self, model_class: type, exports: tuple[str, ...]) -> None:
        """load_weights is a restore; save/export are exports; save_weights only writes (redirected like them)."""
        recorder = self.recorder
        filepath = lambda a, k: a[1] if len(a) > 1 else k.get("filepath")  # noqa: E731
        wrap_method(
            model_class,
            "load_weights",
            _method_recorder(recorder, recorder.restores, "model.load_weights", filepath, (1, "filepath", "load")),
        )
        for method in exports:
            wrap_method(
                model_class,
                method,
                _method_recorder(recorder, recorder.exports, f"model.{method}", filepath, (1, "filepath", "save")),
            )
        wrap_method(model_class, "save_weights", _redirecting(recorder, 1, "filepath"))

    def layer_classes(self, layer_class: type, model_class: type, flavour: str) -> None:
        wrap_method(layer_class, "__init__", _layer_init_recorder(self.recorder, flavour, model_class))

    def savedmodel_layer(self, layer_class: type, api: str, handle_arg: str) -> None:
        wrap_method(layer_class, "__init__", _savedmodel_layer_recorder(self.recorder, api, handle_arg))

    def savedmodel_function(self, original: Callable, api: str, path: tuple) -> None:
        self.function(original, _record_savedmodel_function(self.recorder, api), path)

    def patch(self) -> None:
        patch_functions(self.replacements)


def first(args, kwargs, key="filepath"):
    """The path given as the first argument or as `key`."""
    return args[0] if args else kwargs.get(key)


def second(args, kwargs, key="filepath"):
    return args[1] if len(args) > 1 else kwargs.get(key)


# ---------------------------------------------------------------------- recorders


def _layer_init_recorder(recorder: Recorder, flavour: str, model_class: type):
    def make(original):
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            uid = str(id(self))
            if uid in recorder.layers:  # a subclass __init__ calling super().__init__: keep the outermost record
                recorder.layers[uid].name = getattr(self, "name", None)
                return
            policy, compute, variable = layer_policy(self)
            is_model = isinstance(self, model_class)
            recorder.layers[uid] = LayerRecord(
                class_name=type(self).__name__,
                module=type(self).__module__,
                name=getattr(self, "name", None),
                flavour=flavour,
                policy=policy,
                compute_dtype=compute,
                variable_dtype=variable,
                autocast=autocast_flag(self),
                explicit_dtype=dtype_name(kwargs.get("dtype")),
                created_at=recorder.location(2),
                is_model=is_model,
            )
            recorder.layer_objects.append(self)
            if is_model:
                recorder.models.append(self)

        return __init__

    return make


def _savedmodel_layer_recorder(recorder: Recorder, api: str, handle_arg: str):
    def make(original):
        def __init__(self, *args, **kwargs):
            args, kwargs = _rewrite(args, kwargs, 0, handle_arg, recorder.load_path)
            handle = args[0] if args else kwargs.get(handle_arg)
            entry = SavedModelLoad(
                api,
                _safe_str(handle),
                str(id(self)),
                recorder.location(2),
                call_endpoint=_safe_str(kwargs.get("call_endpoint")),
            )
            recorder.savedmodel_loads.append(entry)
            try:
                original(self, *args, **kwargs)
            except BaseException as exc:
                entry.error = _error(exc)  # the load itself failed (missing handle, no network...)
                raise

        return __init__

    return make


def _record_savedmodel_function(recorder: Recorder, api: str):
    def on_call(args, kwargs, where, exc):
        handle = args[0] if args else kwargs.get("export_dir", kwargs.get("handle"))
        recorder.savedmodel_loads.append(SavedModelLoad(api, _safe_str(handle), None, where, error=_error(exc)))

    return on_call


def _creation_site_recorder(recorder: Recorder):
    """Remember where an object (a TF1 Saver) was created: the finding about its restore belongs there."""

    def make(original):
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            self._mpdoctor_created_at = recorder.location(2)

        return __init__

    return make


def _redirecting(recorder: Recorder, position: int, keyword: str):
    """A method that writes to a path: redirected into the scratch directory, nothing recorded."""

    def make(original):
        def method(*args, **kwargs):
            args, kwargs = _rewrite(args, kwargs, position, keyword, recorder.save_path)
            return original(*args, **kwargs)

        return method

    return make


def _method_recorder(recorder: Recorder, sink: list, api: str, path_of: Callable, path: tuple | None = None):
    """Record each call with its location; a call made inside another recorded call to the same sink (restore()
    calling read(), tf_keras load_weights() calling Checkpoint.read()) is the library's, not the user's: skipped.
    path: (position, keyword, "save" | "load") of the path argument to redirect; a save's entry keeps the path
    the code asked for and says where it was written."""

    def make(original):
        def method(*args, **kwargs):
            if id(sink) in recorder.active_sinks:
                return original(*args, **kwargs)
            where = recorder.location(2)
            asked = _safe_str(path_of(args, kwargs))
            if path is not None:
                position, keyword, kind = path
                args, kwargs = _rewrite(
                    args, kwargs, position, keyword, recorder.save_path if kind == "save" else recorder.load_path
                )
            actual = _safe_str(path_of(args, kwargs))
            created_at = getattr(args[0], "_mpdoctor_created_at", None) if args else None
            if path and path[2] == "save":
                entry = Export(api, asked, actual, where, receiver_created_at=created_at)
            else:
                entry = Restore(api, actual, where, receiver_created_at=created_at)
            recorder.active_sinks.add(id(sink))
            try:
                result = original(*args, **kwargs)
            except BaseException as exc:
                entry.error = _error(exc)
                raise
            finally:
                recorder.active_sinks.discard(id(sink))
                sink.append(entry)
            if sink is recorder.restores and args:
                recorder.live_restores.append((entry, args[0], result))
            return result

        return method

    return make


def _error(exc: BaseException | None) -> ErrorRecord | None:
    if exc is None:
        return None
    return ErrorRecord(type(exc).__name__, str(exc)[:4000])


def _safe_str(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return os.fspath(value) if isinstance(value, os.PathLike) else str(value)
    except Exception:
        return repr(value)
