"""`[tool.mpdoctor]` in the nearest pyproject.toml, overridden by the command line."""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from mpdoctor import reads
from mpdoctor.diagnostics import Severity
from mpdoctor.facts.dtypes import KNOWN_POLICIES
from mpdoctor.facts.trace_request import NumericsRequest
from mpdoctor.registry import default_selection, expand_selector

DEFAULT_EXCLUDE = (
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    "__pycache__",
    "build",
    "dist",
    "node_modules",
    "site-packages",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".mpdoctor_cache",
    ".ipynb_checkpoints",
)


@dataclass
class NumericsConfig:
    """Trace: float16 vs float32 layer by layer on a sample batch (MP404/MP405), see mpdoctor/trace/numerics.py."""

    enabled: bool = True
    threshold: float = 0.05  # MP405: relative error (max |y16 - y32| / max |y32|) above which a layer diverges
    batch_size: int = 2
    seed: int = 0
    range: tuple[float, float] = (0.0, 1.0)  # float inputs of the sample batch: uniform in [low, high)
    sample: str | None = None  # --sample FILE.npz instead of a generated batch

    def request(self) -> NumericsRequest:
        return NumericsRequest(self.enabled, self.threshold, self.batch_size, self.seed, list(self.range), self.sample)


class ConfigError(Exception):
    """A user mistake in configuration or arguments: reported as one line, exit 2."""


@dataclass
class Config:
    select: set[str] = field(default_factory=default_selection)  # opt-in rules (MP603) need their code
    ignore: set[str] = field(default_factory=set)
    per_file_ignores: dict[str, set[str]] = field(default_factory=dict)
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    fail_on: Severity = Severity.WARNING
    keras_version: int | None = None
    keras_version_origin: str = "--keras-version"
    target_tensorflow: str | None = None  # a PEP 440 specifier the TensorFlow target must satisfy
    target_tensorflow_origin: str = "--target-tensorflow"
    assume_policy: str | None = None
    entry: str | None = None  # trace: the function or attribute that gives the model
    trace_timeout: float = 300.0
    strict_imports: bool = False  # trace: a third-party module not installed is an MP001 error, not an MP003 info
    stub_missing: bool = False  # trace: stand-ins for missing non-ML modules (mpdoctor.trace.child.stand_ins)
    keras_backend: str | None = None  # trace: the Keras 3 backend unless KERAS_BACKEND says (facts.keras_backends)
    baseline: Path | None = None  # findings listed there do not fail the run (relative to the pyproject.toml)
    numerics: NumericsConfig = field(default_factory=lambda: NumericsConfig())
    trace_memory: float | None = None  # MiB of resident memory for the trace child; None: no limit
    jobs: int | None = None  # files checked at once (trace children, static workers); None: the usable cores
    cache_dir: Path | None = None  # the result cache (mpdoctor.cache); None: .mpdoctor_cache in the root
    root: Path = field(default_factory=Path.cwd)  # directory of the pyproject.toml, or cwd
    source: Path | None = None  # the pyproject.toml read, if any

    def enabled(self, code: str, display_path: str | None = None) -> bool:
        if code not in self.select or code in self.ignore:
            return False
        if display_path is not None:
            for pattern, codes in self.per_file_ignores.items():
                if code in codes and _path_matches(display_path, pattern):
                    return False
        return True

    def is_excluded(self, path: Path) -> bool:
        try:
            rel = _resolved(path).relative_to(_resolved(self.root)).as_posix()
        except ValueError:
            rel = path.as_posix()
        return any(_path_matches(rel, pattern) for pattern in self.exclude)


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symlink loop: reported by the file walk, matched here as written
        return Path(os.path.abspath(path))


def _path_matches(rel: str, pattern: str) -> bool:
    rel = rel.replace(os.sep, "/")
    parts = rel.split("/")
    pattern = pattern.rstrip("/")
    if "/" not in pattern:
        return any(fnmatch.fnmatch(p, pattern) for p in parts)
    return fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(rel, pattern + "/*") or rel.startswith(pattern + "/")


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above `start`. A folder that cannot be searched (no permission) is passed
    over: the file walk reports it, and the run still gets the configuration of the folders above."""
    start = _resolved(start)
    for directory in [start, *start.parents] if _is_dir(start) else [start.parent, *start.parent.parents]:
        candidate = directory / "pyproject.toml"
        try:
            if candidate.is_file():
                return candidate
        except OSError:
            continue
    return None


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _selectors(value, where: str, opt_in: bool = False) -> set[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of rule codes")
    codes: set[str] = set()
    for selector in value:
        try:
            codes |= expand_selector(selector, opt_in)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return codes


def _severity(value, where: str) -> Severity:
    try:
        return Severity(str(value).lower())
    except ValueError:
        raise ConfigError(f"{where}: expected one of error, warning, info; got {value!r}") from None


def load_config(start: Path, config_file: Path | None = None) -> Config:
    path = config_file or find_pyproject(start)
    config = Config()
    if path is None:
        return config
    config.root, config.source = path.parent, path
    try:
        data = tomllib.loads(reads.read_text(path, reads.CONFIG_LIMIT, "pyproject.toml"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: cannot read: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except ValueError:  # int() of thousands of digits (TOML integers are 64-bit)
        raise ConfigError(f"{path}: invalid TOML: a number too long to read") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: `tool` must be a table, got {_toml_type(tool)}")
    section = tool.get("mpdoctor")
    if section is None:
        return config
    where = f"{path}: [tool.mpdoctor]"
    if not isinstance(section, dict):
        raise ConfigError(f"{where} must be a table, got {_toml_type(section)}")
    unknown = sorted(set(section) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(KNOWN_KEYS))})")
    apply_overrides(config, where, **{k.replace("-", "_"): v for k, v in section.items()})
    return config


def _toml_type(value) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array"}
    return names.get(type(value), type(value).__name__)


def _positive(value) -> bool:
    """A finite positive number (TOML and the command line both spell nan and inf)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def apply_overrides(config: Config, where: str, **settings: Any) -> None:
    """Apply the settings given (a None value: not given) over `config`, in the order of _SETTERS. `where` names
    their source in errors: "command line", or "<pyproject.toml>: [tool.mpdoctor]"."""
    unknown = sorted(set(settings) - _SETTERS.keys())
    if unknown:
        raise TypeError(f"apply_overrides() got an unexpected keyword argument {unknown[0]!r}")
    for name, setter in _SETTERS.items():
        value = settings.get(name)
        if value is not None:
            setter(config, where, value)


# ------------------------------------------------------------------------------------------------ the settings

Setter = Callable[[Config, str, Any], None]


def _select(config: Config, where: str, value: Any) -> None:
    # A later layer's select starts afresh, dropping earlier ignores (ruff semantics).
    config.select = _selectors(value, f"{where} select")
    config.ignore = set()


def _extend_select(config: Config, where: str, value: Any) -> None:
    config.select |= _selectors(value, f"{where} extend-select")


def _ignore(config: Config, where: str, value: Any) -> None:
    config.ignore |= _selectors(value, f"{where} ignore", opt_in=True)


def _per_file_ignores(config: Config, where: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} per-file-ignores: expected a table of glob = [codes]")
    for pattern, codes in value.items():
        config.per_file_ignores[pattern] = _selectors(codes, f"{where} per-file-ignores {pattern!r}", opt_in=True)


def _exclude(config: Config, where: str, value: Any) -> None:
    config.exclude = _patterns(value, f"{where} exclude")


def _extend_exclude(config: Config, where: str, value: Any) -> None:
    config.exclude += _patterns(value, f"{where} extend-exclude")


def _fail_on(config: Config, where: str, value: Any) -> None:
    config.fail_on = _severity(value, f"{where} fail-on")


def _keras_version(config: Config, where: str, value: Any) -> None:
    if str(value) not in ("2", "3"):
        raise ConfigError(f"{where} keras-version: expected 2 or 3, got {value!r}")
    config.keras_version = int(value)
    config.keras_version_origin = _origin(where, "--keras-version", "keras-version")


def _target_tensorflow(config: Config, where: str, value: Any) -> None:
    config.target_tensorflow = tensorflow_specifier(value, f"{where} target-tensorflow")
    config.target_tensorflow_origin = _origin(where, "--target-tensorflow", "target-tensorflow")


def _assume_policy(config: Config, where: str, value: Any) -> None:
    if value not in KNOWN_POLICIES:
        raise ConfigError(f"{where} assume-policy: expected one of {', '.join(KNOWN_POLICIES)}, got {value!r}")
    config.assume_policy = value


def _entry(config: Config, where: str, value: Any) -> None:
    if not isinstance(value, str) or not value.isidentifier():
        raise ConfigError(f"{where} entry: expected a Python name, got {value!r}")
    config.entry = value


def _trace_timeout(config: Config, where: str, value: Any) -> None:
    config.trace_timeout = _positive_number(value, f"{where} trace-timeout", " of seconds")


def _strict_imports(config: Config, where: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{where} strict-imports: expected true or false, got {value!r}")
    config.strict_imports = value


def _stub_missing(config: Config, where: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{where} stub-missing: expected true or false, got {value!r}")
    config.stub_missing = value


def _keras_backend(config: Config, where: str, value: Any) -> None:
    from mpdoctor.facts.keras_backends import KERAS_BACKENDS

    if value not in KERAS_BACKENDS:
        raise ConfigError(f"{where} keras-backend: expected one of {', '.join(KERAS_BACKENDS)}, got {value!r}")
    config.keras_backend = value


def _baseline(config: Config, where: str, value: Any) -> None:
    config.baseline = config.root / _path(value, f"{where} baseline", "the path of a baseline file")


def _numerics(config: Config, where: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{where} numerics: expected true or false, got {value!r}")
    config.numerics.enabled = value


def _numerics_threshold(config: Config, where: str, value: Any) -> None:
    config.numerics.threshold = _positive_number(value, f"{where} numerics-threshold")


def _sample_batch_size(config: Config, where: str, value: Any) -> None:
    config.numerics.batch_size = _integer(value, f"{where} sample-batch-size", "an integer from 1 to 1024", 1, 1024)


def _sample_seed(config: Config, where: str, value: Any) -> None:
    config.numerics.seed = _integer(value, f"{where} sample-seed", "a non-negative integer", 0)


def _sample_range(config: Config, where: str, value: Any) -> None:
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
        or not value[0] < value[1]
    ):
        raise ConfigError(f"{where} sample-range: expected [low, high] with low < high, got {value!r}")
    config.numerics.range = (float(value[0]), float(value[1]))


def _trace_memory(config: Config, where: str, value: Any) -> None:
    config.trace_memory = _positive_number(value, f"{where} trace-memory", " of MiB")


def _jobs(config: Config, where: str, value: Any) -> None:
    config.jobs = _integer(value, f"{where} jobs", "a positive integer", 1)


def _cache_dir(config: Config, where: str, value: Any) -> None:
    config.cache_dir = config.root / _path(value, f"{where} cache-dir", "the path of a directory")


# Every setting (its [tool.mpdoctor] key with "_" for "-"), in the order applied: `select` before `ignore` (it drops
# the ignores of the layers before); otherwise the order decides which error a run with several wrong settings gets.
_SETTERS: dict[str, Setter] = {
    "select": _select,
    "extend_select": _extend_select,
    "ignore": _ignore,
    "per_file_ignores": _per_file_ignores,
    "exclude": _exclude,
    "extend_exclude": _extend_exclude,
    "fail_on": _fail_on,
    "keras_version": _keras_version,
    "target_tensorflow": _target_tensorflow,
    "assume_policy": _assume_policy,
    "entry": _entry,
    "trace_timeout": _trace_timeout,
    "strict_imports": _strict_imports,
    "stub_missing": _stub_missing,
    "keras_backend": _keras_backend,
    "baseline": _baseline,
    "numerics": _numerics,
    "numerics_threshold": _numerics_threshold,
    "sample_batch_size": _sample_batch_size,
    "sample_seed": _sample_seed,
    "sample_range": _sample_range,
    "trace_memory": _trace_memory,
    "jobs": _jobs,
    "cache_dir": _cache_dir,
}
KNOWN_KEYS = frozenset(name.replace("_", "-") for name in _SETTERS)  # of [tool.mpdoctor]


# ------------------------------------------------------------------------------------------------ checked values


def _patterns(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of glob patterns")
    return tuple(value)


def _positive_number(value: Any, where: str, unit: str = "") -> float:
    if not _positive(value):
        raise ConfigError(f"{where}: expected a positive number{unit}, got {value!r}")
    return float(value)


def _integer(value: Any, where: str, expected: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        raise ConfigError(f"{where}: expected {expected}, got {value!r}")
    return value


def _path(value: Any, where: str, expected: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected {expected}, got {value!r}")
    return value


def _origin(where: str, option: str, key: str) -> str:
    """How the target's sources name a setting: the option, or the key and the file it is in."""
    if where == "command line":
        return option
    from mpdoctor.project.requirements import shown

    return f"[tool.mpdoctor] {key} in {shown(Path(where.split(': [tool.mpdoctor]')[0]))}"


def tensorflow_specifier(value, where: str) -> str:
    """A TensorFlow target as a PEP 440 specifier: ">=2.12,<2.16", "==2.15.*"; a bare "2.15" means "==2.15.*"."""
    from mpdoctor.project.requirements import releases_for

    text = str(value).strip() if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""
    if text and (text[0].isdigit()):
        text = f"=={text}" if text.count(".") >= 2 or text.endswith("*") else f"=={text}.*"
    releases = releases_for(text) if text else None
    if releases is None:
        raise ConfigError(f"{where}: expected a version specifier such as '>=2.12,<2.16' or '2.15', got {value!r}")
    if not releases:
        raise ConfigError(f"{where}: {text!r} allows no TensorFlow release mpdoctor knows (1.0 to 2.21)")
    return text
