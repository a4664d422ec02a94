"""JUnit XML for CI test-report views (GitLab, Jenkins, Azure, CircleCI...).

One <testsuite name="mpdoctor">; each diagnostic is a failing <testcase classname=PATH name="CODE line:col">, each
file that could not be checked an <error>. The Report does not say which files were clean, so a run without any
finding or error gets a single passing testcase named "mpdoctor" (a suite with no testcase looks like "no tests").
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from typing import TextIO

from mpdoctor.diagnostics import Report
from mpdoctor.fingerprints import posix_path
from mpdoctor.registry import rule_name
from mpdoctor.report.text import where_text

# Characters XML 1.0 cannot carry at all, even escaped: replaced, so a hostile message cannot break the document.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def clean(text: str) -> str:
    return _INVALID_XML.sub("\ufffd", text)


def _element(parent: ET.Element, tag: str, text: str | None = None, /, **attributes: object) -> ET.Element:
    element = ET.SubElement(parent, tag, {k: clean(str(v)) for k, v in attributes.items()})
    if text is not None:
        element.text = clean(text)
    return element


def to_element(report: Report) -> ET.Element:
    failures, errors = len(report.diagnostics), len(report.errors)
    tests = failures + errors or 1
    counts = {"tests": tests, "failures": failures, "errors": errors, "skipped": 0, "time": "0"}
    root = ET.Element("testsuites", {"name": "mpdoctor", **{k: str(v) for k, v in counts.items()}})
    suite = _element(root, "testsuite", name="mpdoctor", **counts)
    for d in report.diagnostics:
        loc = d.location
        path = posix_path(loc.path)
        cell = f"cell {loc.cell} " if loc.cell is not None else ""
        case = _element(
            suite,
            "testcase",
            classname=path,
            name=f"{d.code} {cell}{loc.line}:{loc.column}",
            file=path,
            line=loc.line,
            time="0",
        )
        name = rule_name(d.code)
        body = [
            f"{where_text(replace(loc, path=path))}: {d.code}{f' {name}' if name else ''} "
            f"({d.severity.value}): {d.message}"
        ]
        body += [f"note: {n}" for n in d.notes]
        if d.fix is not None:
            body.append(f"fix ({d.fix.applicability}): {d.fix.description}")
        _element(case, "failure", "\n".join(body), type=d.code, message=d.message)
    for e in report.errors:
        path = posix_path(e.path)
        where = f"{e.line}:{e.column or 1}" if e.line else None
        attributes: dict[str, object] = {
            "classname": path,
            "name": f"{e.kind} error" + (f" {where}" if where else ""),
            "file": path,
        }
        if e.line:
            attributes["line"] = e.line
        case = _element(suite, "testcase", **attributes, time="0")
        _element(case, "error", e.render(), type=e.kind, message=e.message)
    if not report.diagnostics and not report.errors:
        _element(suite, "testcase", classname="mpdoctor", name="mpdoctor", time="0")
    return root


def render(report: Report, stream: TextIO, **_options: object) -> None:
    root = to_element(report)
    ET.indent(root)
    stream.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    # ASCII with character references: valid UTF-8 whatever the stream's own encoding can carry.
    stream.write(ET.tostring(root, encoding="us-ascii").decode("ascii"))
    stream.write("\n")
