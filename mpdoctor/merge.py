"""`mpdoctor merge`: `--format json` reports read back into Reports (the inverse of report.json_format.to_dict) and
combined into one.

A report file is untrusted input: anything that is not a version-1 mpdoctor report raises ReportFormatError with a
one-line reason.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from mpdoctor.diagnostics import (
    Confidence,
    Diagnostic,
    DiagnosticContext,
    Edit,
    FileError,
    Fix,
    Location,
    Report,
    Severity,
)
from mpdoctor.facts.codec import SchemaError
from mpdoctor.facts.schema import TraceSummary
from mpdoctor.report.json_format import SCHEMA_VERSION
from mpdoctor.sources import read_checked


class ReportFormatError(Exception):
    pass


def read_report(path: Path) -> Report:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportFormatError(f"cannot read: {getattr(exc, 'strerror', None) or exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise ReportFormatError(f"not JSON ({exc})") from exc
    if not isinstance(data, dict) or (data.get("tool") or {}).get("name") != "mpdoctor":
        raise ReportFormatError("not an mpdoctor JSON report (mpdoctor check --format json)")
    if data.get("version") != SCHEMA_VERSION:
        raise ReportFormatError(f"report schema version {data.get('version')!r}, this mpdoctor reads {SCHEMA_VERSION}")
    try:
        summary = data["summary"]
        return Report(
            diagnostics=[_diagnostic(item) for item in data["diagnostics"]],
            errors=[_error(item) for item in data["errors"]],
            files_checked=int(summary["files"]),
            passes=tuple(summary["passes"]),
            traces=[TraceSummary.from_json(item) for item in data.get("traces", [])],
            baselined=int(summary.get("baselined", 0)),
            targets=_targets(data.get("files", [])),
        )
    except (KeyError, TypeError, ValueError, AttributeError, SchemaError) as exc:
        raise ReportFormatError(f"malformed report ({type(exc).__name__}: {exc})") from exc


def _targets(files: list) -> dict:
    """files[].target: the TensorFlow/Keras target each file was judged against (issue 13)."""
    from mpdoctor.project.target import Target

    return {item["path"]: Target.from_json(item["target"]) for item in files}


def _diagnostic(item: dict) -> Diagnostic:
    fix, cell_fix = item.get("fix"), item.get("cell_fix")
    context = item.get("context")
    return Diagnostic(
        code=item["code"],
        message=item["message"],
        location=Location(
            item["path"],
            item["line"],
            item["column"],
            item.get("end_line"),
            item.get("end_column"),
            item.get("layer"),
            item.get("cell"),
        ),
        severity=Severity(item["severity"]),
        passes=tuple(item["passes"]),
        confidence=Confidence(item["confidence"]),
        fix=None if fix is None else _fix(fix),
        notes=tuple(item.get("notes", ())),
        cell_fix=None if cell_fix is None else _fix(cell_fix, cell_fix["cell"]),
        context=None
        if context is None
        else DiagnosticContext(context["policy"], context["set_at"], context["condition"], tuple(context["path"])),
    )


def _fix(item: dict, cell: int | None = None) -> Fix:
    return Fix(item["description"], tuple(Edit(**edit) for edit in item["edits"]), item["applicability"], cell)


def _error(item: dict) -> FileError:
    return FileError(
        item["path"], item["message"], item.get("line"), item.get("column"), item["kind"], item.get("cell")
    )


def merge_reports(reports: list[Report]) -> Report:
    """One report of several over disjoint files: findings in the usual order, traces and errors by path. The text
    of files with findings is read again (the text renderer and the baseline need it)."""
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
    for path in sorted({d.location.path for d in merged.diagnostics}):
        with contextlib.suppress(OSError, UnicodeDecodeError, SyntaxError, ValueError):  # then no source line
            merged.sources[path] = read_checked(Path(path))
    return merged
