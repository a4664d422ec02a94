"""`mpdoctor merge`: `--format json` reports read back into Reports (the inverse of report.json_format.to_dict) and
combined into one.

A report file is untrusted input (a CI artifact anyone with write access to the pipeline could forge): it is read
as a regular file of bounded size, checked against the version-1 schema (every value's type, known codes, severities
and passes), and anything else raises ReportFormatError with a one-line reason.

The reports must be one complete run: the shards `1/N` ... `N/N` of one `check --shard` split, each once (a shard
report records its index and count), and/or unsharded reports; no file may be checked by two of them (the same
report twice, a shard and the unsharded run, two overlapping runs), since its findings would count twice. A report
without a `files` list (an older mpdoctor's) cannot be checked for overlap and is taken as it is.

The merged report's source lines (text output, HTML, the baseline's fingerprints) are read again from the checkout,
and only from it: a Python file or notebook under the current directory (symlinks resolved), regular, of bounded
size. Any other path (a forged report's `/etc/passwd`, `../secrets`, `.env`) simply has no source lines; so has a
checked file named without `.py` (`mpdoctor check bin/train`), which only loses the quoted line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpdoctor import reads
from mpdoctor.diagnostics import (
    PASS_NAMES,
    Confidence,
    Diagnostic,
    DiagnosticContext,
    Edit,
    FileError,
    Fix,
    Location,
    Report,
    Severity,
    SourceText,
)
from mpdoctor.facts.codec import SchemaError, from_json
from mpdoctor.facts.schema import TraceSummary
from mpdoctor.notebook import is_notebook
from mpdoctor.registry import rule_name
from mpdoctor.report.json_format import SCHEMA_VERSION
from mpdoctor.sources import read_checked

_PASSES = frozenset(PASS_NAMES.values())
_APPLICABILITIES = frozenset({"safe", "unsafe"})


class ReportFormatError(Exception):
    pass


# The version-1 schema as facts.codec reads it (report.json_format writes it): types checked, unknown keys ignored
# (a newer mpdoctor may add fields; `name` of a diagnostic is derived from its code).


@dataclass(frozen=True)
class _FixRecord:
    description: str
    edits: list[Edit]  # read as diagnostics.Edit itself: the same fields
    applicability: str = "safe"
    cell: int | None = None  # cell_fix only


@dataclass(frozen=True)
class _ContextRecord:
    policy: str | None
    set_at: str | None
    condition: str | None
    path: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _DiagnosticRecord:
    code: str
    message: str
    severity: str
    path: str
    line: int
    column: int
    passes: list[str]
    confidence: str
    end_line: int | None = None
    end_column: int | None = None
    layer: str | None = None
    cell: int | None = None
    notes: list[str] = field(default_factory=list)
    fix: _FixRecord | None = None
    cell_fix: _FixRecord | None = None
    context: _ContextRecord | None = None


@dataclass(frozen=True)
class _ErrorRecord:
    path: str
    message: str
    line: int | None = None
    column: int | None = None
    kind: str = "error"
    cell: int | None = None


@dataclass(frozen=True)
class _SummaryRecord:
    files: int
    passes: list[str]
    baselined: int = 0


@dataclass(frozen=True)
class _ShardRecord:
    index: int
    count: int


@dataclass(frozen=True)
class _FileRecord:
    path: str
    target: dict[str, Any]  # checked by Target.from_json


@dataclass(frozen=True)
class _ReportRecord:
    diagnostics: list[_DiagnosticRecord]
    errors: list[_ErrorRecord]
    summary: _SummaryRecord
    traces: list[TraceSummary] = field(default_factory=list)
    files: list[_FileRecord] | None = None  # None: an older mpdoctor's report
    shard: _ShardRecord | None = None


@dataclass
class ReadReport:
    """A report file read back: the report, the files it checked (None: not recorded) and its shard (index, count)."""

    path: Path
    report: Report
    checked: set[str] | None
    shard: tuple[int, int] | None


def read_report(path: Path) -> ReadReport:
    try:
        text = reads.read_text(path, reads.REPORT_LIMIT, "JSON report")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportFormatError(f"cannot read: {getattr(exc, 'strerror', None) or exc}") from exc
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ReportFormatError(f"not JSON ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("tool"), dict) or data["tool"].get("name") != "mpdoctor":
        raise ReportFormatError("not an mpdoctor JSON report (mpdoctor check --format json)")
    if data.get("version") != SCHEMA_VERSION:
        raise ReportFormatError(f"report schema version {data.get('version')!r}, this mpdoctor reads {SCHEMA_VERSION}")
    try:
        record = from_json(_ReportRecord, data)
        return _report(path, record)
    except SchemaError as exc:
        raise ReportFormatError(f"malformed report ({str(exc)[:200]})") from None


def _report(path: Path, record: _ReportRecord) -> ReadReport:
    summary = record.summary
    _check(summary.files >= 0 and summary.baselined >= 0, "$.summary: negative count")
    _check(set(summary.passes) <= _PASSES, f"$.summary.passes: unknown pass in {summary.passes!r}")
    shard = record.shard
    if shard is not None:
        _check(1 <= shard.index <= shard.count, f"$.shard: {shard.index}/{shard.count} is not a shard")
    report = Report(
        diagnostics=[_diagnostic(item, f"$.diagnostics[{i}]") for i, item in enumerate(record.diagnostics)],
        errors=[_error(item) for item in record.errors],
        files_checked=summary.files,
        passes=tuple(summary.passes),
        traces=list(record.traces),
        baselined=summary.baselined,
        targets=_targets(record.files or []),
    )
    checked = None if record.files is None else {f.path for f in record.files} | {e.path for e in report.errors}
    return ReadReport(path, report, checked, None if shard is None else (shard.index, shard.count))


def _check(condition: bool, problem: str) -> None:
    if not condition:
        raise SchemaError(problem)


def _targets(files: list[_FileRecord]) -> dict:
    """files[].target: the TensorFlow/Keras target each file was judged against (issue 13)."""
    from mpdoctor.project.target import Target

    targets = {}
    for i, item in enumerate(files):
        try:
            targets[item.path] = Target.from_json(item.target)
        except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError, RecursionError) as exc:
            raise SchemaError(f"$.files[{i}].target: {type(exc).__name__}: {exc}") from None
    return targets


def _diagnostic(item: _DiagnosticRecord, where: str) -> Diagnostic:
    _check(rule_name(item.code) is not None, f"{where}.code: unknown rule code {item.code!r}")
    _check(item.severity in Severity._value2member_map_, f"{where}.severity: {item.severity!r}")
    _check(item.confidence in Confidence._value2member_map_, f"{where}.confidence: {item.confidence!r}")
    _check(set(item.passes) <= _PASSES, f"{where}.passes: unknown pass in {item.passes!r}")
    context = item.context
    return Diagnostic(
        code=item.code,
        message=item.message,
        location=Location(item.path, item.line, item.column, item.end_line, item.end_column, item.layer, item.cell),
        severity=Severity(item.severity),
        passes=tuple(item.passes),
        confidence=Confidence(item.confidence),
        fix=None if item.fix is None else _fix(item.fix, f"{where}.fix"),
        notes=tuple(item.notes),
        cell_fix=None if item.cell_fix is None else _fix(item.cell_fix, f"{where}.cell_fix", item.cell_fix.cell),
        context=None
        if context is None
        else DiagnosticContext(context.policy, context.set_at, context.condition, tuple(context.path)),
    )


def _fix(item: _FixRecord, where: str, cell: int | None = None) -> Fix:
    _check(item.applicability in _APPLICABILITIES, f"{where}.applicability: {item.applicability!r}")
    return Fix(item.description, tuple(item.edits), item.applicability, cell)


def _error(item: _ErrorRecord) -> FileError:
    return FileError(item.path, item.message, item.line, item.column, item.kind, item.cell)


def check_complete(reports: list[ReadReport]) -> None:
    """Raise ReportFormatError unless the reports are one complete run: the sharded ones all shards of one split,
    each once; no file checked by two reports."""
    for i, read in enumerate(reports):
        twice = next((other for other in reports[:i] if _same_file(other.path, read.path)), None)
        if twice is not None:
            raise ReportFormatError(f"{read.path}: given twice (its findings would count twice)")
    _check_shards([r for r in reports if r.shard is not None])
    owner: dict[str, int] = {}  # checked file -> the first report that checked it
    for i, read in enumerate(reports):
        for shown in sorted(read.checked or ()):
            first = owner.setdefault(shown, i)
            if first != i:
                raise ReportFormatError(
                    f"{read.path}: checked {shown} too, as {reports[first].path} did: the reports overlap (its"
                    " findings would count twice); merge the reports of one run"
                )


def _same_file(one: Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


def _check_shards(sharded: list[ReadReport]) -> None:
    if not sharded:
        return
    first = sharded[0]
    first_index, count = first.shard or (0, 0)
    seen: dict[int, Path] = {}
    for read in sharded:
        index, its_count = read.shard or (0, 0)
        if its_count != count:
            raise ReportFormatError(
                f"{read.path}: shard {index}/{its_count}, but {first.path} is shard {first_index}/{count}: the shards"
                " of two different splits"
            )
        if index in seen:
            raise ReportFormatError(f"{read.path}: shard {index}/{count} again (also {seen[index]})")
        seen[index] = read.path
    missing = [f"{i}/{count}" for i in range(1, count + 1) if i not in seen]
    if missing:
        raise ReportFormatError(
            f"incomplete set of shards: {', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''} missing"
            f" (given {len(seen)} of {count})"
        )


def merge_reports(reports: list[Report], root: Path | None = None) -> Report:
    """One report of several over disjoint files: findings in the usual order, traces and errors by path. The text
    of files with findings is read again (the text renderer and the baseline need it), from under `root` only
    (default: the current directory)."""
    merged = Report(passes=tuple(dict.fromkeys(p for r in reports for p in r.passes)) or ("static",))
    for report in reports:
        merged.diagnostics += report.diagnostics
        merged.errors += report.errors
        merged.traces += report.traces
        merged.files_checked += report.files_checked
        merged.baselined += report.baselined
        merged.targets.update(report.targets)
    merged.diagnostics.sort(key=Diagnostic.sort_key)
    merged.errors.sort(key=lambda e: e.path)
    merged.traces.sort(key=lambda t: t.path)
    inside = Path(os.path.realpath(root or os.getcwd()))
    for shown in sorted({d.location.path for d in merged.diagnostics}):
        source = _source_inside(shown, inside)
        if source is not None:
            merged.sources[shown] = source
    return merged


def _source_inside(shown: str, root: Path) -> SourceText | None:
    """The text of the checked file `shown`, if it is a Python file or notebook (what a directory walk checks; a
    forged report's `.env` is neither), a regular file under `root` and of bounded size; else None."""
    resolved = Path(os.path.realpath(root / shown))
    if not resolved.is_relative_to(root) or not (resolved.suffix == ".py" or is_notebook(resolved)):
        return None
    with contextlib.suppress(OSError, UnicodeDecodeError, SyntaxError, ValueError):  # then no source line
        if reads.regular_file_problem(resolved) is None and resolved.stat().st_size <= reads.SOURCE_LIMIT:
            return dataclasses.replace(read_checked(resolved), path=Path(shown))
    return None
