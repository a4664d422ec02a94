"""`[tool.mpdoctor]` in the nearest pyproject.toml, overridden by the command line."""

from __future__ import annotations

import fnmatch
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

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

KNOWN_KEYS = {
    "select",
    "extend-select",
    "ignore",
    "per-file-ignores",
    "exclude",
    "extend-exclude",
    "fail-on",
    "keras-version",
    "target-tensorflow",
    "assume-policy",
    "entry",
    "trace-timeout",
    "baseline",
    "numerics",
    "numerics-threshold",
    "sample-batch-size",
    "sample-seed",
    "sample-range",
    "trace-memory",
    "jobs",
    "cache-dir",
}


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


def apply_overrides(
    config: Config,
    where: str,
    *,
    select=None,
    extend_select=None,
    ignore=None,
    per_file_ignores=None,
    exclude=None,
    extend_exclude=None,
    fail_on=None,
    keras_version=None,
    target_tensorflow=None,
    assume_policy=None,
    entry=None,
    trace_timeout=None,
    baseline=None,
    numerics=None,
    numerics_threshold=None,
    sample_batch_size=None,
    sample_seed=None,
    sample_range=None,
    trace_memory=None,
    jobs=None,
    cache_dir=None,
) -> None:
    if select is not None:  # a later layer's select starts afresh, dropping earlier ignores (ruff semantics)
        config.select = _selectors(select, f"{where} select")
        config.ignore = set()
    if extend_select is not None:
        config.select |= _selectors(extend_select, f"{where} extend-select")
    if ignore is not None:
        config.ignore |= _selectors(ignore, f"{where} ignore", opt_in=True)
    if per_file_ignores is not None:
        if not isinstance(per_file_ignores, dict):
            raise ConfigError(f"{where} per-file-ignores: expected a table of glob = [codes]")
        for pattern, codes in per_file_ignores.items():
            config.per_file_ignores[pattern] = _selectors(codes, f"{where} per-file-ignores {pattern!r}", opt_in=True)
    for key, value in (("exclude", exclude), ("extend-exclude", extend_exclude)):
        if value is None:
            continue
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} {key}: expected a list of glob patterns")
        config.exclude = tuple(value) if key == "exclude" else config.exclude + tuple(value)
    if fail_on is not None:
        config.fail_on = _severity(fail_on, f"{where} fail-on")
    if keras_version is not None:
        if str(keras_version) not in ("2", "3"):
            raise ConfigError(f"{where} keras-version: expected 2 or 3, got {keras_version!r}")
        config.keras_version = int(keras_version)
        config.keras_version_origin = _origin(where, "--keras-version", "keras-version")
    if target_tensorflow is not None:
        config.target_tensorflow = tensorflow_specifier(target_tensorflow, f"{where} target-tensorflow")
        config.target_tensorflow_origin = _origin(where, "--target-tensorflow", "target-tensorflow")
    if assume_policy is not None:
        if assume_policy not in KNOWN_POLICIES:
            raise ConfigError(
                f"{where} assume-policy: expected one of {', '.join(KNOWN_POLICIES)}, got {assume_policy!r}"
            )
        config.assume_policy = assume_policy
    if entry is not None:
        if not isinstance(entry, str) or not entry.isidentifier():
            raise ConfigError(f"{where} entry: expected a Python name, got {entry!r}")
        config.entry = entry
    if trace_timeout is not None:
        if not _positive(trace_timeout):
            raise ConfigError(f"{where} trace-timeout: expected a positive number of seconds, got {trace_timeout!r}")
        config.trace_timeout = float(trace_timeout)
    if baseline is not None:
        if not isinstance(baseline, str) or not baseline:
            raise ConfigError(f"{where} baseline: expected the path of a baseline file, got {baseline!r}")
        config.baseline = config.root / baseline
    _numerics_overrides(
        config.numerics, where, numerics, numerics_threshold, sample_batch_size, sample_seed, sample_range
    )
    if trace_memory is not None:
        if not _positive(trace_memory):
            raise ConfigError(f"{where} trace-memory: expected a positive number of MiB, got {trace_memory!r}")
        config.trace_memory = float(trace_memory)
    if jobs is not None:
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise ConfigError(f"{where} jobs: expected a positive integer, got {jobs!r}")
        config.jobs = jobs
    if cache_dir is not None:
        if not isinstance(cache_dir, str) or not cache_dir:
            raise ConfigError(f"{where} cache-dir: expected the path of a directory, got {cache_dir!r}")
        config.cache_dir = config.root / cache_dir


def _origin(where: str, option: str, key: str) -> str:
    """How the target's sources name a setting: the option, or the key and the file it is in."""
    if where == "command line":
        return option
    from mpdoctor.static.declared import shown

    return f"[tool.mpdoctor] {key} in {shown(Path(where.split(': [tool.mpdoctor]')[0]))}"


def tensorflow_specifier(value, where: str) -> str:
    """A TensorFlow target as a PEP 440 specifier: ">=2.12,<2.16", "==2.15.*"; a bare "2.15" means "==2.15.*"."""
    from mpdoctor.static.declared import releases_for

    text = str(value).strip() if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""
    if text and (text[0].isdigit()):
        text = f"=={text}" if text.count(".") >= 2 or text.endswith("*") else f"=={text}.*"
    releases = releases_for(text) if text else None
    if releases is None:
        raise ConfigError(f"{where}: expected a version specifier such as '>=2.12,<2.16' or '2.15', got {value!r}")
    if not releases:
        raise ConfigError(f"{where}: {text!r} allows no TensorFlow release mpdoctor knows (1.0 to 2.21)")
    return text


def _numerics_overrides(
    numerics: NumericsConfig, where: str, enabled, threshold, batch_size, seed, sample_range
) -> None:
    if enabled is not None:
        if not isinstance(enabled, bool):
            raise ConfigError(f"{where} numerics: expected true or false, got {enabled!r}")
        numerics.enabled = enabled
    if threshold is not None:
        if not _positive(threshold):
            raise ConfigError(f"{where} numerics-threshold: expected a positive number, got {threshold!r}")
        numerics.threshold = float(threshold)
    if batch_size is not None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= 1024:
            raise ConfigError(f"{where} sample-batch-size: expected an integer from 1 to 1024, got {batch_size!r}")
        numerics.batch_size = batch_size
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"{where} sample-seed: expected a non-negative integer, got {seed!r}")
        numerics.seed = seed
    if sample_range is not None:
        if (
            not isinstance(sample_range, (list, tuple))
            or len(sample_range) != 2
            or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in sample_range
            )
            or not sample_range[0] < sample_range[1]
        ):
            raise ConfigError(f"{where} sample-range: expected [low, high] with low < high, got {sample_range!r}")
        numerics.range = (float(sample_range[0]), float(sample_range[1]))
