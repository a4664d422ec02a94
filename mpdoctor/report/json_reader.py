"""A `--format json` report read back into a Report (for `mpdoctor merge`): the inverse of json_format.to_dict.

The file is untrusted input: anything that is not a version-1 mpdoctor report raises ReportFormatError with a
one-line reason.
"""

from __future__ import annotations

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
        )
    except (KeyError, TypeError, ValueError, AttributeError, SchemaError) as exc:
        raise ReportFormatError(f"malformed report ({type(exc).__name__}: {exc})") from exc


def _diagnostic(item: dict) -> Diagnostic:
    fix = item.get("fix")
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
        fix=None
        if fix is None
        else Fix(fix["description"], tuple(Edit(**edit) for edit in fix["edits"]), fix["applicability"]),
        notes=tuple(item.get("notes", ())),
        context=None
        if context is None
        else DiagnosticContext(context["policy"], context["set_at"], context["condition"], tuple(context["path"])),
    )


def _error(item: dict) -> FileError:
    return FileError(
        item["path"], item["message"], item.get("line"), item.get("column"), item["kind"], item.get("cell")
    )
