"""SARIF 2.1.0 for GitHub code scanning (and any other SARIF consumer).

Every registered rule is listed in ``tool.driver.rules`` (generated from the registry, never by hand); each
diagnostic becomes a result pointing at a path relative to ``%SRCROOT%``; files that could not be checked become
``invocations[0].toolExecutionNotifications``. Fingerprints leave the line number out so an alert keeps its
identity when code above it moves.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import quote

from mpdoctor._version import __version__
from mpdoctor.diagnostics import Diagnostic, FileError, Fix, Location, Report, Severity
from mpdoctor.fingerprints import fingerprint, fingerprint_materials, posix_path
from mpdoctor.printable import name_bytes
from mpdoctor.report.json_text import write_indented

if TYPE_CHECKING:
    from mpdoctor.registry import Rule

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
INFORMATION_URI = "https://github.com/mpdoctor/mpdoctor"
SRCROOT = "%SRCROOT%"
FINGERPRINT_KEY = "mpdoctorFingerprint/v1"
RULE_TAGS = ("mixed-precision", "tensorflow", "keras")

LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


# --- helpers shared with the other CI formats (github, junit, gitlab) ----------------------------------------------


def cell_prefix(loc: Location) -> str:
    """Formats whose line fields mean lines of the file say where in a notebook the finding is in the message."""
    return f"cell {loc.cell}, line {loc.line}: " if loc.cell is not None else ""


# --- SARIF -------------------------------------------------------------------------------------------------------


def artifact_location(path: str) -> dict[str, str]:
    if os.path.isabs(path):  # outside the working directory: an absolute file URI, no base
        return {"uri": Path(os.fsdecode(name_bytes(path))).as_uri()}
    # A non-UTF-8 name is shown as `bad\\xff.py`: its URI percent-encodes the real byte (bad%FF.py).
    return {"uri": quote(name_bytes(posix_path(path)), safe="/"), "uriBaseId": SRCROOT}


def _region(line: int, column: int, end_line: int | None, end_column: int | None) -> dict[str, int]:
    region = {"startLine": max(1, line), "startColumn": max(1, column)}
    if end_line is not None:
        region["endLine"] = max(region["startLine"], end_line)
    if end_column is not None:
        region["endColumn"] = max(1, end_column)
    return region


def _help_markdown(rule: Rule) -> str:
    return "\n\n".join(
        [
            f"**{rule.code} {rule.name}**: {rule.summary}",
            f"### What it detects\n\n{rule.what}",
            f"### Why it breaks\n\n{rule.why}",
            f"### Bad\n\n```python\n{rule.bad}\n```",
            f"### Good\n\n```python\n{rule.good}\n```",
            f"### Fix\n\n{rule.fix}",
        ]
    )


def _help_text(rule: Rule) -> str:
    return "\n\n".join(
        [
            f"{rule.code} {rule.name}: {rule.summary}",
            f"What it detects:\n{rule.what}",
            f"Why it breaks:\n{rule.why}",
            f"Bad:\n{rule.bad}",
            f"Good:\n{rule.good}",
            f"Fix:\n{rule.fix}",
        ]
    )


def rule_descriptor(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.what},
        "help": {"text": _help_text(rule), "markdown": _help_markdown(rule)},
        # SARIF's `enabled`: an opt-in rule is off unless selected by its code.
        "defaultConfiguration": {"level": LEVELS[rule.severity], "enabled": not rule.opt_in},
        "properties": {"tags": list(RULE_TAGS), "passes": list(rule.pass_names), "fixable": rule.fixable},
    }


def _fix(fix: Fix) -> dict[str, Any]:
    changes: dict[str, list[dict[str, Any]]] = {}
    for e in fix.edits:
        changes.setdefault(e.path, []).append(
            {
                "deletedRegion": _region(e.line, e.column, e.end_line, e.end_column),
                "insertedContent": {"text": e.content},
            }
        )
    return {
        "description": {"text": fix.description},
        "artifactChanges": [
            {"artifactLocation": artifact_location(path), "replacements": replacements}
            for path, replacements in changes.items()
        ],
        "properties": {"applicability": fix.applicability},
    }


def _result(d: Diagnostic, rule_index: dict[str, int], material: str) -> dict[str, Any]:
    loc = d.location
    result: dict[str, Any] = {"ruleId": d.code}
    if d.code in rule_index:
        result["ruleIndex"] = rule_index[d.code]
    result["level"] = LEVELS[d.severity]
    result["message"] = {"text": cell_prefix(loc) + d.message}
    result["locations"] = [
        {
            "physicalLocation": {
                "artifactLocation": artifact_location(loc.path),
                "region": _region(loc.line, loc.column, loc.end_line or loc.line, loc.end_column),
            }
        }
    ]
    # A notebook's region lines are lines of the cell named by the "cell" logical location (and in the message).
    logical = ([{"name": f"cell {loc.cell}", "kind": "cell"}] if loc.cell is not None else []) + (
        [{"name": loc.layer}] if loc.layer else []
    )
    if logical:
        result["locations"][0]["logicalLocations"] = logical
    result["partialFingerprints"] = {FINGERPRINT_KEY: fingerprint(material)}
    if d.fix is not None and d.fix.edits:
        result["fixes"] = [_fix(d.fix)]
    properties: dict[str, Any] = {"confidence": d.confidence.value, "passes": list(d.passes)}
    if loc.cell is not None:
        properties["cell"] = loc.cell
    if d.notes:
        properties["notes"] = list(d.notes)
    if d.context is not None:
        properties["policyContext"] = d.context.to_dict()
    result["properties"] = properties
    return result


def _notification(error: FileError) -> dict[str, Any]:
    notification: dict[str, Any] = {
        "level": "error",
        "message": {"text": error.render()},
        "descriptor": {"id": f"mpdoctor/{error.kind}"},
    }
    physical: dict[str, Any] = {"artifactLocation": artifact_location(error.path)}
    if error.line:
        physical["region"] = _region(error.line, error.column or 1, None, None)
    notification["locations"] = [{"physicalLocation": physical}]
    return notification


def _directory_uri(directory: Path) -> str:
    uri = directory.as_uri()
    return uri if uri.endswith("/") else uri + "/"  # SARIF: a base URI ends with a slash


def to_dict(report: Report) -> dict[str, Any]:
    from mpdoctor.registry import all_rules

    rules = all_rules()
    rule_index = {r.code: i for i, r in enumerate(rules)}
    materials = fingerprint_materials(report.diagnostics, report.sources)
    invocation: dict[str, Any] = {"executionSuccessful": not report.errors}
    if report.errors:
        invocation["toolExecutionNotifications"] = [_notification(e) for e in report.errors]
    run = {
        "tool": {
            "driver": {
                "name": "mpdoctor",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": INFORMATION_URI,
                "rules": [rule_descriptor(r) for r in rules],
            }
        },
        "originalUriBaseIds": {SRCROOT: {"uri": _directory_uri(Path.cwd())}},  # relative paths are from the cwd
        "invocations": [invocation],
        "results": [_result(d, rule_index, m) for d, m in zip(report.diagnostics, materials, strict=True)],
        "properties": {"filesChecked": report.files_checked, "passes": list(report.passes)},
    }
    return {"$schema": SCHEMA_URI, "version": SARIF_VERSION, "runs": [run]}


def render(report: Report, stream: TextIO, **_options: object) -> None:
    write_indented(to_dict(report), stream)
    stream.write("\n")
