"""The stable JSON schema (version 1). Fields may be added, never renamed or removed."""

from __future__ import annotations

from collections.abc import Callable
from json.encoder import encode_basestring_ascii as quoted  # a str as JSON text
from typing import TYPE_CHECKING, Any, TextIO

from mpdoctor._version import __version__
from mpdoctor.diagnostics import Diagnostic, Fix, Report
from mpdoctor.registry import rule_name
from mpdoctor.report.json_text import Encoded, dumps_indented, write_indented

if TYPE_CHECKING:
    from mpdoctor.project.target import Target

SCHEMA_VERSION = 1


def _target_json(target: Target) -> dict[str, Any]:
    return target.to_json()


def diagnostic_to_dict(d: Diagnostic) -> dict[str, Any]:
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


def _fix(fix: Fix) -> dict[str, Any]:
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


def to_dict(report: Report, target_json: Callable[[Target], object] = _target_json) -> dict[str, Any]:
    """The document as plain data; `target_json`: a file's target in it."""
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
        "files": [{"path": path, "target": target_json(target)} for path, target in sorted(report.targets.items())],
        **({"fixes": [f.to_dict() for f in report.fixes]} if report.fixes is not None else {}),
        # Only in the report of a `check --shard I/N` run: which shard (`mpdoctor merge` requires all N, each once).
        **({"shard": {"index": report.shard[0], "count": report.shard[1]}} if report.shard is not None else {}),
    }


def prerender(d: Diagnostic) -> str:
    """The diagnostic's text in the document (an element of "diagnostics", two levels deep), for
    engine.check_paths to compute in its worker processes: on a report of thousands of findings, encoding them
    was most of what the parent did after the checks (bench/static.py, "directory of 2,000 files").

    `dumps_indented(diagnostic_to_dict(d), depth=2)`, filled into a template instead, with the texts of the values
    findings share (code, severity, path, passes...) encoded once (a third of the time); the rare findings with
    a cell fix or a policy context, or with a value other than a string, int or None where those are expected,
    the generic way. tests/test_json_text.py holds the two to the same text."""
    loc, fix = d.location, d.fix
    line, column = loc.line, loc.column
    end_line, end_column = loc.end_line or line, loc.end_column or column
    if (
        d.cell_fix is not None
        or d.context is not None
        or type(d.message) is not str
        or not type(line) is type(column) is type(end_line) is type(end_column) is int
    ):
        return dumps_indented(diagnostic_to_dict(d), depth=2)
    try:
        return _DIAGNOSTIC % (
            _shared("code", d.code),
            _shared("name", d.code),
            _shared("severity", d.severity),
            quoted(d.message),
            _shared("path", loc.path),
            line,
            column,
            end_line,
            end_column,
            _shared("layer", loc.layer),
            _shared("cell", loc.cell),
            _shared("passes", d.passes),
            _shared("confidence", d.confidence),
            _shared("notes", d.notes),
            "null" if fix is None else _fix_text(fix),
        )
    except _NotScalar:
        return dumps_indented(diagnostic_to_dict(d), depth=2)


def _template(keys: tuple[str, ...], depth: int, ints: tuple[str, ...] = ()) -> str:
    """The text of an object of these keys at this depth, `%s` for each value's text (`%d` for the `ints`)."""
    inner = "\n" + "  " * (depth + 1)
    values = {key: "%d" if key in ints else "%s" for key in keys}
    return "{" + ",".join(f'{inner}"{key}": {value}' for key, value in values.items()) + "\n" + "  " * depth + "}"


_LOCATION_INTS = ("line", "column", "end_line", "end_column")
# The keys of diagnostic_to_dict and _fix, in their order, at their depths in the document.
_DIAGNOSTIC = _template(
    (
        "code",
        "name",
        "severity",
        "message",
        "path",
        *_LOCATION_INTS,
        "layer",
        "cell",
        "passes",
        "confidence",
        "notes",
        "fix",
    ),
    2,
    ints=_LOCATION_INTS,
)
_FIX = _template(("applicability", "description", "edits"), 3)
_EDIT = _template(("path", *_LOCATION_INTS, "content"), 5, ints=_LOCATION_INTS)


class _NotScalar(Exception):
    pass


def _scalar(value: object) -> str:
    """A string, int or None as JSON text."""
    kind = type(value)
    if kind is str:  # type() identity: quicker than isinstance, not narrowed by mypy
        return quoted(value)  # type: ignore[arg-type]
    if value is None:
        return "null"
    if kind is int:
        return int.__repr__(value)
    raise _NotScalar


def _list_text(items: object) -> str:
    if type(items) is not tuple or any(type(item) is not str for item in items):
        raise _NotScalar
    return dumps_indented(list(items), depth=3)


# How prerender encodes each field that findings share values of: the text of a (field, type, value) is computed
# once (`True` and `1` are equal keys: the type keeps their texts apart).
_ENCODERS: dict[str, Callable[[Any], str]] = {
    "code": _scalar,
    "name": lambda code: _scalar(rule_name(code)),
    "severity": lambda member: _scalar(member.value),
    "confidence": lambda member: _scalar(member.value),
    "path": _scalar,
    "applicability": _scalar,
    "layer": _scalar,
    "cell": _scalar,
    "passes": _list_text,
    "notes": _list_text,
}
_SHARED: dict[tuple[str, type, object], str] = {}


def _shared(field: str, value: object) -> str:
    key = (field, type(value), value)
    try:
        return _SHARED[key]
    except KeyError:
        pass
    except TypeError:  # unhashable: not a value of the types expected
        raise _NotScalar from None
    text = _ENCODERS[field](value)
    if len(_SHARED) > 4096:  # the paths of a big tree: the recent ones are the ones asked for again
        _SHARED.clear()
    _SHARED[key] = text
    return text


def _fix_text(fix: Fix) -> str:
    edits = []
    for e in fix.edits:
        if not type(e.line) is type(e.column) is type(e.end_line) is type(e.end_column) is int:
            raise _NotScalar
        edits.append(_EDIT % (_shared("path", e.path), e.line, e.column, e.end_line, e.end_column, _scalar(e.content)))
    listed = "[" + ",".join("\n          " + edit for edit in edits) + "\n        ]" if edits else "[]"
    return _FIX % (_shared("applicability", fix.applicability), _scalar(fix.description), listed)


def _diagnostic(report: Report, d: Diagnostic) -> dict[str, Any] | Encoded:
    text = report.prerendered_text(d)
    return diagnostic_to_dict(d) if text is None else Encoded(text)


def render(report: Report, stream: TextIO, **_options: object) -> None:
    write_indented(to_dict(report, _encoded_once()), stream)
    stream.write("\n")


def _encoded_once() -> Callable[[Target], Encoded]:
    """A file's target as JSON text, each Target object encoded once: most files of a tree share one
    (mpdoctor.project.target.resolve). By identity: hashing a Target's fields for every file cost more."""
    encoded: dict[int, tuple[Target, Encoded]] = {}

    def target_text(target: Target) -> Encoded:
        entry = encoded.get(id(target))
        if entry is None:  # the entry holds the target: its id is not reused while this lives
            entry = encoded[id(target)] = (target, Encoded(dumps_indented(target.to_json(), 3)))
        return entry[1]

    return target_text
