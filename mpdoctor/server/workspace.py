"""A buffer checked as `mpdoctor check --stdin-filename PATH` checks it: the configuration of the pyproject above
PATH with the client's settings on top, the file's TensorFlow/Keras target, the policy contexts its project's entry
points put it under (`train.py` setting the policy for `models/net.py`), and the trace only for a saved file (it
runs the file on disk). State lives in the server (mpdoctor.server.app); this is the checking."""

from __future__ import annotations

import copy
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mpdoctor.config import Config, ConfigError, apply_overrides, find_pyproject, load_config
from mpdoctor.diagnostics import Diagnostic, FileError
from mpdoctor.engine import TraceOptions, analyse_projects, check_source, display_path
from mpdoctor.notebook import Notebook
from mpdoctor.static.policy_context import FileContexts

TRACE_MODES = ("onSave", "off")
_SETTINGS_WHERE = "editor settings"
# The client's settings keys (camelCase, as editors spell them) and the configuration option each one sets.
_OVERRIDES = {
    "select": "select",
    "extendSelect": "extend_select",
    "ignore": "ignore",
    "assumePolicy": "assume_policy",
    "kerasVersion": "keras_version",
    "targetTensorflow": "target_tensorflow",
}


@dataclass(frozen=True)
class ClientSettings:
    """What the client's settings (initializationOptions, workspace/didChangeConfiguration) may set."""

    trace: str = "onSave"
    overrides: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, value: object) -> ClientSettings:
        """Settings as editors send them: flat, or under `mpdoctor` (`settings.mpdoctor`); unknown keys are left
        alone (a client may send its own)."""
        if isinstance(value, dict) and isinstance(value.get("settings"), dict):
            value = value["settings"]
        if isinstance(value, dict) and isinstance(value.get("mpdoctor"), dict):
            value = value["mpdoctor"]
        if not isinstance(value, dict):
            return cls()
        trace = value.get("trace", "onSave")
        overrides = {option: value[key] for key, option in _OVERRIDES.items() if value.get(key) is not None}
        return cls(trace=trace if trace in TRACE_MODES else "onSave", overrides=overrides)


@dataclass(frozen=True)
class Checked:
    diagnostics: list[Diagnostic]
    error: FileError | None
    config_error: str | None = None  # the configuration could not be read: the defaults were used


class Workspace:
    """The configuration and project contexts of the files being edited, cached until a save or a settings change
    says they may have changed. Thread-safe: the trace worker checks from its own thread."""

    def __init__(self) -> None:
        self.settings = ClientSettings()
        self._lock = threading.Lock()
        self._configs: dict[tuple[str | None, float | None], tuple[Config, str | None]] = {}
        self._contexts: dict[str, FileContexts | None] = {}
        self.folders: list[Path] = []  # the client's workspace folders

    def configure(self, settings: ClientSettings) -> None:
        with self._lock:
            self.settings = settings
            self._configs.clear()
            self._contexts.clear()

    def saved(self) -> None:
        """A file of the project changed on disk: its entry points may set another policy, call other code."""
        from mpdoctor.project import target

        with self._lock:
            self._contexts.clear()
        target.new_run()  # requirements, Dockerfiles and other declarations are read afresh too

    def config_for(self, path: Path | None) -> tuple[Config, str | None]:
        """The configuration `check` would use for `path` with the client's settings applied, and why the defaults
        were used instead if it could not be read (a one-line message, as `check` prints)."""
        start = path if path is not None else Path.cwd()
        pyproject = find_pyproject(start)
        key = (str(pyproject) if pyproject else None, _mtime(pyproject))
        with self._lock:
            found = self._configs.get(key)
            if found is None:
                found = self._configs[key] = self._load(start)
            return found

    def _load(self, start: Path) -> tuple[Config, str | None]:
        """The pyproject's configuration (the defaults if it cannot be read), then the client's settings (left out if
        one is invalid); the first problem, said once to the user."""
        problem = None
        try:
            config = load_config(start)
        except ConfigError as exc:
            config, problem = Config(), f"{exc} (the defaults are used)"
        with_settings = copy.deepcopy(config)  # a setting that fails may follow others already applied
        try:
            apply_overrides(with_settings, _SETTINGS_WHERE, **self.settings.overrides)
        except ConfigError as exc:
            return config, problem or f"{exc} (the editor settings are not applied)"
        return with_settings, problem

    def contexts_for(self, path: Path | None, config: Config) -> FileContexts | None:
        """The policy contexts the entry points of the file's project put it under (the project analysis, once per
        file until a save)."""
        if path is None or not path.is_file():
            return None
        key = os.path.abspath(path)
        with self._lock:
            if key in self._contexts:
                return self._contexts[key]
        contexts = analyse_projects([self._folder_of(path)], [path], config).contexts_for(path)
        with self._lock:
            self._contexts[key] = contexts
        return contexts

    def _folder_of(self, path: Path) -> Path:
        """What `check FOLDER` would analyse as the file's project: its workspace folder (the project root above the
        file wins: mpdoctor.project.discovery), or the file alone outside every folder."""
        return next((f for f in sorted(self.folders, key=lambda f: -len(f.parts)) if f in path.parents), path)

    def check(self, path: Path | None, name: str, text: str) -> Checked:
        """The static findings of `text`, the buffer of the file at `path` (None: an untitled buffer called
        `name`)."""
        config, config_error = self.config_for(path)
        if path is not None and config.is_excluded(path):
            return Checked([], None, config_error)  # as `ruff server`: an excluded file (a .venv's) is left alone
        shown = display_path(path) if path is not None else name
        diagnostics, error = check_source(
            text,
            shown,
            config,
            path=os.fspath(path) if path is not None else None,
            project=self.contexts_for(path, config),
        )
        return Checked(diagnostics, error, config_error)

    def trace(self, path: Path) -> Checked:
        """The saved file checked as `mpdoctor check FILE` checks it with the trace: the engine's run over it in
        its project, the result cache (an unchanged file is not traced again) and the fork server (TensorFlow
        imported once for the server's life)."""
        from mpdoctor.cli.check import NO_CACHE_VARIABLE
        from mpdoctor.engine import check_paths

        config, config_error = self.config_for(path)
        if config.is_excluded(path):
            return Checked([], None, config_error)
        options = _trace_options(config)
        cache = None
        if os.environ.get(NO_CACHE_VARIABLE, "") in ("", "0"):
            from mpdoctor.cache import ResultCache, cache_directory

            cache = ResultCache(cache_directory(None, config.cache_dir, config.root), config, options)
        report = check_paths([self._folder_of(path)], config, options, collected=([path], [], []), cache=cache)
        return Checked(report.diagnostics, report.errors[0] if report.errors else None, config_error)

    def check_notebook(self, path: Path | None, name: str, notebook: Notebook) -> Checked:
        """The findings of a notebook's code cells, located in their cells, as `check` reports an .ipynb (no
        project contexts: the engine gives a notebook none either)."""
        config, config_error = self.config_for(path)
        if path is not None and config.is_excluded(path):
            return Checked([], None, config_error)
        shown = display_path(path) if path is not None else name
        found, error = check_source(notebook.source, shown, config, path=os.fspath(path) if path is not None else None)
        found, error = notebook.map_results(shown, path or Path(shown), found, error, [])
        return Checked(found, error, config_error)


def _trace_options(config: Config) -> TraceOptions:
    """The trace as `check` configures it from the pyproject (one file at a time: the server traces on save)."""
    return replace(
        TraceOptions(),
        enabled=True,
        timeout=config.trace_timeout,
        entry=config.entry,
        numerics=config.numerics.request(),
        memory_limit_mb=config.trace_memory,
    )


def _mtime(path: Path | None) -> float | None:
    try:
        return path.stat().st_mtime if path is not None else None
    except OSError:
        return None


def on_disk(path: Path | None, text: str) -> bool:
    """Whether the file at `path` holds `text`: the trace runs the file, so only then may it stand for the buffer."""
    from mpdoctor.sources import read_source

    if path is None:
        return False
    try:
        return read_source(path) == text
    except (OSError, UnicodeDecodeError, SyntaxError):
        return False
