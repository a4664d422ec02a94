"""GitLab Code Quality report: a JSON array of issues shown in the merge request widget.

Fingerprints are MD5 of the same line-number-free material as SARIF's, so GitLab tracks a finding across commits
that only move it. Files that could not be checked are reported too (check_name "mpdoctor/<kind>-error"), so a
broken file cannot pass for a clean one.
"""

from __future__ import annotations

import hashlib
from typing import Any, TextIO

from mpdoctor.diagnostics import Report, Severity
from mpdoctor.fingerprints import fingerprint_materials, posix_path
from mpdoctor.report.json_text import write_indented
from mpdoctor.report.sarif import cell_prefix

SEVERITIES = {Severity.ERROR: "critical", Severity.WARNING: "major", Severity.INFO: "info"}


def _md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def to_list(report: Report) -> list[dict[str, Any]]:
    issues = []
    for d, material in zip(report.diagnostics, fingerprint_materials(report.diagnostics, report.sources), strict=True):
        loc = d.location
        issues.append(
            {
                "description": f"{d.code}: {cell_prefix(loc)}{d.message}",
                "check_name": d.code,
                "fingerprint": _md5(material),
                "severity": SEVERITIES[d.severity],
                "location": {
                    "path": posix_path(loc.path),
                    "lines": {"begin": loc.line, "end": max(loc.line, loc.end_line or loc.line)},
                },
            }
        )
    for e in report.errors:
        line = e.line or 1
        issues.append(
            {
                "description": e.render(),
                "check_name": f"mpdoctor/{e.kind}-error",
                "fingerprint": _md5("\0".join(("error", e.kind, posix_path(e.path), e.message))),
                "severity": "critical",
                "location": {"path": posix_path(e.path), "lines": {"begin": line, "end": line}},
            }
        )
    return issues


def render(report: Report, stream: TextIO, **_options: object) -> None:
    write_indented(to_list(report), stream)
    stream.write("\n")
