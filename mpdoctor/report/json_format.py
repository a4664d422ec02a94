"""The stable JSON schema (version 1). Fields may be added, never renamed or removed."""

from __future__ import annotations

from typing import TextIO

from mpdoctor._version import __version__
from mpdoctor.diagnostics import Diagnostic, Fix
from mpdoctor.registry import rule_name
from mpdoctor.report.json_text import Encoded, dumps_indented, write_indented

SCHEMA_VERSION = 1


def diagnostic_to_dict(d: Diagnostic) -> dict:
    loc = d.location
    return {
        "code": d.code,
        "name": rule_name(d.code),
        "severity": d.severity.value,
        "message": d.message,
        "path": loc.path,
        "line": loc.line,
        "column": loc.column,
        "end_line": loc.end_line or loc.line,
        "end_column": loc.end_column or loc.column,
        "layer": loc.layer,
        "cell": loc.cell,  # notebooks: the cell (from 1), line/end_line are within it; null for .py files
        "passes": list(d.passes),
        "confidence": d.confidence.value,
        "notes": list(d.notes),
        "fix": None if d.fix is None else _fix(d.fix),
        # Only on findings of a notebook (or a checked cell) whose fix is shown as a diff of its cell, never applied:
        # the same fields, its edits in lines of that cell, and the cell (from 1; null for a %%mpdoctor cell).
        **({"cell_fix": {**_fix(d.cell_fix), "cell": d.cell_fix.cell}} if d.cell_fix is not None else {}),
        # Only on findings that exist under a policy context of the project (issue 21): the policy, where and when
        # it is set, and the calls from there to the finding's function.
        **({"context": d.context.to_dict()} if d.context is not None else {}),
    }


def _fix(fix: Fix) -> dict:
    return {
        "applicability": fix.applicability,
        "description": fix.description,
        "edits": [
            {
                "path": e.path,
                "line": e.line,
                "column": e.column,
                "end_line": e.end_line,
                "end_column": e.end_column,
                "content": e.content,
            }
            for e in fix.edits
        ],
    }


def to_dict(report) -> dict:
    return {
        "version": SCHEMA_VERSION,
        "tool": {"name": "mpdoctor", "version": __version__},
        "diagnostics": [_diagnostic(report, d) for d in report.diagnostics],
        "errors": [
            {"path": e.path, "line": e.line, "column": e.column, "cell": e.cell, "kind": e.kind, "message": e.message}
            for e in report.errors
        ],
        "summary": report.summary(),
        "traces": [trace.to_json() for trace in report.traces],
        # Per checked file: the TensorFlow/Keras target it was judged against and where each part came from.
        "files": [{"path": path, "target": target.to_json()} for path, target in sorted(report.targets.items())],
        **({"fixes": [f.to_dict() for f in report.fixes]} if report.fixes is not None else {}),
    }


def prerender(d: Diagnostic) -> str:
    """The diagnostic's text in the document (an element of "diagnostics", two levels deep), for
    engine.check_paths to compute in its worker processes: on a report of thousands of findings, encoding them
    was most of what the parent did after the checks (bench/static.py, "directory of 2,000 files")."""
    return dumps_indented(diagnostic_to_dict(d), depth=2)


def _diagnostic(report, d: Diagnostic) -> dict | Encoded:
    text = report.prerendered_text(d)
    return diagnostic_to_dict(d) if text is None else Encoded(text)


def render(report, stream: TextIO, **_options) -> None:
    write_indented(to_dict(report), stream)
    stream.write("\n")
