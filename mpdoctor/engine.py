"""Run the passes over files, apply selection and suppressions, merge and sort. Never prints."""

from __future__ import annotations

import ast
import os
import re
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

from mpdoctor.config import Config
from mpdoctor.diagnostics import Confidence, Diagnostic, Edit, Fix, Location, Severity
from mpdoctor.notebook import SUFFIX as NOTEBOOK_SUFFIX, NotebookError, is_notebook, read_notebook
from mpdoctor.registry import get_rule, implemented_codes, static_checks
from mpdoctor.static.policies import is_float16_compute
from mpdoctor.static.context import Settings, StaticContext, source_lines
from mpdoctor.suppress import ALL, find_suppressions, is_suppressed

# A file that mentions none of these cannot hold a finding: skip the rules (ruff/torchfix-style cheap path).
_MARKER = re.compile(r"tensorflow|keras|tensorflow_hub|mixed_precision")
# Tokenizing is slower than parsing: only files that may hold one of our comments pay for it.
_MAY_SUPPRESS = re.compile(r"noqa\s*:[^\n]*MP\d|mpdoctor\s*:", re.IGNORECASE)


@dataclass(frozen=True)
class FileError:
    """A file that could not be checked: unreadable, not Python, or an internal error."""

    path: str
    message: str
    line: int | None = None
    column: int | None = None
    kind: str = "error"  # "syntax" | "io" | "internal"
    cell: int | None = None  # notebooks: line is then the line within this cell

    def render(self) -> str:
        if self.cell is not None:
            where = f"{self.path}:cell {self.cell}:line {self.line}:col {self.column}"
        else:
            where = f"{self.path}:{self.line}:{self.column}" if self.line else self.path
        return f"{where}: {self.message}"


@dataclass
class Report:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    files_checked: int = 0
    passes: tuple[str, ...] = ("static",)
    traces: list[dict] = field(default_factory=list)  # per traced file: models' graphs, SavedModels, environment
    baselined: int = 0  # findings left out because the --baseline file lists them
    fixes: list | None = None  # --fix/--diff: one mpdoctor.autofix.FileFix per file with fixes

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Severity}
        for d in self.diagnostics:
            counts[d.severity.value] += 1
        return counts

    def by_code(self) -> dict[str, int]:
        result: dict[str, int] = {}
        for d in self.diagnostics:
            result[d.code] = result.get(d.code, 0) + 1
        return dict(sorted(result.items()))

    def fixable(self) -> int:
        return sum(1 for d in self.diagnostics if d.fix is not None)

    def summary(self) -> dict:
        summary = {"files": self.files_checked, "total": len(self.diagnostics), "by_severity": self.counts(),
                   "by_code": self.by_code(), "fixable": self.fixable(), "errors": len(self.errors),
                   "passes": list(self.passes), "baselined": self.baselined}
        if self.fixes is not None:
            summary["fixed"] = sum(len(f.applied) for f in self.fixes if f.written)
        return summary


def display_path(path: Path) -> str:
    """Relative to cwd when inside it (like ruff/mypy), else as given."""
    try:
        return os.path.relpath(path) if not os.path.relpath(path).startswith("..") else str(path)
    except ValueError:
        return str(path)


def collect_files(paths: Iterable[Path], config: Config) -> tuple[list[Path], list[FileError]]:
    files: list[Path] = []
    errors: list[FileError] = []
    seen: set[Path] = set()
    for path in paths:
        if not path.exists():
            errors.append(FileError(str(path), "no such file or directory", kind="io"))
            continue
        if path.is_file():
            candidates = [path]  # named explicitly: always checked, like ruff without --force-exclude
        else:
            candidates = []
            for root, dirs, names in os.walk(path):
                root_path = Path(root)
                dirs[:] = sorted(d for d in dirs if not config.is_excluded(root_path / d))
                candidates += [root_path / n for n in sorted(names)
                               if n.endswith((".py", NOTEBOOK_SUFFIX)) and not config.is_excluded(root_path / n)]
        for candidate in candidates:
            key = candidate.resolve()
            if key not in seen:
                seen.add(key)
                files.append(candidate)
    return files, errors


def read_source(path: Path) -> str:
    data = path.read_bytes()
    import tokenize
    import io

    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


@dataclass(frozen=True)
class TraceOptions:
    enabled: bool = False
    timeout: float = 300.0
    entry: str | None = None
    checkpoints: tuple[str, ...] = ()  # --checkpoint: audited against the model's compute dtype
    numerics: dict | None = None  # float16 vs float32 per layer: options for the child (mpdoctor/trace/numerics.py)
    memory_limit_mb: float | None = None  # --trace-memory: the child is killed beyond this resident memory


def check_paths(paths: Iterable[Path], config: Config, trace: TraceOptions | None = None,
                progress: Callable[[int, int, str], None] | None = None, sources: dict | None = None) -> Report:
    """`progress(index, total, shown)` is called before each file (the CLI draws it on a terminal); `sources`, when
    given, receives display path -> (path, text analysed) for --fix."""
    trace = trace or TraceOptions()
    files, errors = collect_files(paths, config)
    report = Report(errors=errors, passes=("static", "trace") if trace.enabled else ("static",))
    for index, path in enumerate(files, start=1):
        shown = display_path(path)
        if progress is not None:
            progress(index, len(files), shown)
        notebook = None
        try:
            if is_notebook(path):
                notebook = read_notebook(path)
                text = notebook.source
            else:
                text = read_source(path)
        except NotebookError as exc:
            report.errors.append(FileError(shown, str(exc), kind="io"))
            continue
        except (OSError, UnicodeDecodeError, SyntaxError) as exc:
            report.errors.append(FileError(shown, f"cannot read file: {_reason(exc)}", kind="io"))
            continue
        traced_before = len(report.traces)
        diagnostics, error = check_source(text, shown, config, path=str(path), trace=trace, traces=report.traces)
        if notebook is not None:
            diagnostics, error = notebook.map_results(shown, path, diagnostics, error, report.traces[traced_before:])
        report.files_checked += 1
        if sources is not None:
            sources[shown] = (path, text)
        report.diagnostics += diagnostics
        if error:
            report.errors.append(error)
    report.diagnostics.sort(key=Diagnostic.sort_key)
    return report


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def parse_source(text: str, shown: str) -> tuple[ast.Module | None, FileError | None]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences in user code are not our business
            return ast.parse(text, filename=shown), None
    except SyntaxError as exc:
        return None, FileError(shown, f"syntax error: {exc.msg}", exc.lineno or 1, exc.offset or 1, kind="syntax")
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, pathological nesting
        return None, FileError(shown, f"cannot parse: {exc}", kind="syntax")


def check_source(text: str, shown: str, config: Config, path: str | None = None,
                 trace: TraceOptions | None = None, traces: list | None = None, run_from: str | None = None
                 ) -> tuple[list[Diagnostic], FileError | None]:
    """Static (and, when enabled, trace) pass over one file: diagnostics after selection and suppression, or a
    parse error. A file that does not parse is never run. `run_from`: a file holding `text` that the trace runs
    as if it were `path` (to verify a fix before writing it)."""
    tree, error = parse_source(text, shown)
    if tree is None:
        return [], error
    settings = Settings(keras_version=config.keras_version, assumed_policy=config.assume_policy)
    raw, internal = _static_diagnostics(text, shown, tree, config, path, settings)
    passes = "S"
    if trace is not None and trace.enabled and _MARKER.search(text):
        from mpdoctor.trace.checks import static_after_trace, trace_diagnostics

        traced, verdicts = trace_diagnostics(path or shown, shown, text, tree, config, settings, trace, traces,
                                             run_from=run_from)
        raw = merge_passes(static_after_trace(raw, verdicts), traced)
        passes = "ST"
    return finish(raw, text, shown, config, ran_passes=passes), internal


def _static_diagnostics(text: str, shown: str, tree: ast.Module, config: Config, path: str | None,
                        settings: Settings) -> tuple[list[Diagnostic], FileError | None]:
    raw: list[Diagnostic] = []
    internal: FileError | None = None
    if not _MARKER.search(text):
        return raw, internal
    ctx = None  # built only for a file some check may fire on: most files of a big tree need none
    float16_assumed = is_float16_compute(config.assume_policy)
    seen: dict[str, bool] = {}
    for check in static_checks():
        if not any(config.enabled(c, shown) for c in check.codes) or not check.may_fire(text, float16_assumed, seen):
            continue
        ctx = ctx or StaticContext(path or shown, shown, text, tree, settings)
        name = check.fn.__name__
        try:
            raw.extend(check.fn(ctx))
        except RecursionError:
            internal = FileError(shown, f"internal error: {name} gave up on deeply nested code", kind="internal")
        except Exception as exc:  # a bug in one rule must not hide the others' findings
            internal = FileError(shown, f"internal error in {name}: {type(exc).__name__}: {exc}", kind="internal")
    return raw, internal


def merge_passes(static: list[Diagnostic], traced: list[Diagnostic]) -> list[Diagnostic]:
    """One diagnostic per problem: a trace finding of the same code on the same line as a static one confirms
    it (passes static+trace, high confidence, the trace's observed message, whichever fix exists)."""
    by_key = {(d.code, d.location.path, d.location.line): d for d in static}
    merged = list(static)
    removed_api_lines = {(d.location.path, d.location.line) for d in static if d.code == "MP103"}
    for t in traced:
        if t.code == "MP001" and (t.location.path, t.location.line) in removed_api_lines and \
                re.search(r"raised (ImportError|ModuleNotFoundError|AttributeError)\b", t.message):
            continue  # the crash is the removed mixed-precision API that MP103 (static-only) reports on that line
        s = by_key.pop((t.code, t.location.path, t.location.line), None)
        if s is None:  # no static finding, or one already confirmed by another trace finding on that line
            merged.append(t)
            continue
        merged[merged.index(s)] = replace(
            t, location=replace(s.location, layer=t.location.layer or s.location.layer),
            passes=("static", "trace"), confidence=Confidence.HIGH, fix=t.fix or s.fix,
            notes=tuple(dict.fromkeys(t.notes + s.notes)))
    return merged


def finish(raw: list[Diagnostic], text: str, shown: str, config: Config, ran_passes: str) -> list[Diagnostic]:
    """Select, dedupe, suppress, and report unused suppressions (MP002)."""
    selected: dict[tuple, Diagnostic] = {}
    for d in raw:
        if config.enabled(d.code, shown):
            selected.setdefault((d.code, d.location.line, d.location.column, d.location.layer), d)
    suppressions = find_suppressions(text) if _MAY_SUPPRESS.search(text) else []
    kept = [d for d in selected.values()
            if not is_suppressed(suppressions, d.code, (d.location.line, d.location.end_line or d.location.line))]
    if config.enabled("MP002", shown):
        kept += _unused_suppressions(suppressions, shown, config, ran_passes, text)
    return sorted(kept, key=Diagnostic.sort_key)


def _unused_suppressions(suppressions, shown: str, config: Config, ran_passes: str, text: str) -> list[Diagnostic]:
    found = []
    lines = source_lines(text)
    for s in suppressions:
        if ALL in s.codes:
            unused = () if s.used else ("all codes",)
        else:
            # A code whose rule cannot run in these passes (or is disabled) may be needed by another run: keep quiet.
            unused = tuple(c for c in s.codes if c not in s.used and _could_have_run(c, config, shown, ran_passes))
        if not unused:
            continue
        rule = get_rule("MP002")
        what = ", ".join(unused)
        fix = None
        if ALL not in s.codes and len(unused) == len(s.codes) and s.only_ours:
            fix = _remove_comment_fix(shown, lines, s)
        found.append(Diagnostic(
            code="MP002", message=f"unused suppression ({what}): nothing here was reported",
            location=Location(shown, s.line, s.column, s.line, s.end_column), severity=rule.severity,
            passes=("static",), fix=fix))
    return found


def _could_have_run(code: str, config: Config, shown: str, ran_passes: str) -> bool:
    try:
        rule = get_rule(code)
    except KeyError:
        return True  # a code we do not know is certainly unused
    return config.enabled(code, shown) and any(p in ran_passes for p in rule.passes) and code in implemented_codes()


def _remove_comment_fix(shown: str, lines: list[str], s) -> Fix:
    line_text = lines[s.line - 1]
    start = s.column - 1
    while start > 0 and line_text[start - 1] in " \t":
        start -= 1
    if line_text[:start].strip() == "":
        edit = Edit(shown, s.line, 1, s.line + 1, 1, "")  # the comment is the whole line
    else:
        edit = Edit(shown, s.line, start + 1, s.line, len(line_text) + 1, "")
    return Fix("remove the unused suppression comment", (edit,))
