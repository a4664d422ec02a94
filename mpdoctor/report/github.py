"""GitHub Actions workflow commands: one `::error|warning|notice file=...::message` line per finding.

GitHub turns them into annotations on the pull request's diff. Values are escaped as the Actions runner expects:
in the message `%`, CR and LF; in properties also `:` and `,`; other control characters as in text output.
"""

from __future__ import annotations

from typing import TextIO

from mpdoctor.diagnostics import Report, Severity
from mpdoctor.fingerprints import posix_path
from mpdoctor.printable import escape_controls
from mpdoctor.registry import rule_name
from mpdoctor.report.sarif import cell_prefix

COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(value: str) -> str:
    # Other control characters (terminal escapes from layer names or file names) would reach the job log raw.
    return escape_controls(value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def escape_property(value: str) -> str:
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def command(name: str, properties: list[tuple[str, object]], message: str) -> str:
    props = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties if value is not None)
    return f"::{name} {props}::{escape_data(message)}" if props else f"::{name}::{escape_data(message)}"


def render(report: Report, stream: TextIO, **_options: object) -> None:
    for d in report.diagnostics:
        loc = d.location
        name = rule_name(d.code)
        title = f"{d.code} ({name})" if name else d.code
        if loc.cell is not None:  # lines of a cell are not lines of the .ipynb file: a file-level annotation
            position = []
        else:
            position = [
                ("line", loc.line),
                ("col", loc.column),
                ("endLine", loc.end_line or loc.line),
                ("endColumn", loc.end_column),
            ]
        stream.write(
            command(
                COMMANDS[d.severity],
                [("file", posix_path(loc.path)), *position, ("title", title)],
                cell_prefix(loc) + d.message,
            )
            + "\n"
        )
    for e in report.errors:
        stream.write(
            command(
                "error",
                [
                    ("file", posix_path(e.path)),
                    ("line", e.line),
                    ("col", e.column if e.line else None),
                    ("title", f"mpdoctor ({e.kind} error)"),
                ],
                e.message,
            )
            + "\n"
        )
