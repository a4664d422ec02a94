"""Self-contained HTML report (jinja2, autoescaped, no external resources, a Content-Security-Policy that forbids
scripts and network access). Templates live in reports/templates/ and ship inside the wheel."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO

from mpdoctor import __version__
from mpdoctor.report.json_format import diagnostic_to_dict

_SNIPPET_CONTEXT = 2


def _template_dir() -> Path:
    try:
        from importlib.resources import files

        packaged = files("mpdoctor._templates")
        if packaged.joinpath("report.html.j2").is_file():
            return Path(str(packaged))
    except (ImportError, ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parents[2] / "reports" / "templates"  # a source checkout


def _snippet(path: str, line: int) -> list[tuple[int, str]]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    start, end = max(1, line - _SNIPPET_CONTEXT), min(len(lines), line + _SNIPPET_CONTEXT)
    return [(n, lines[n - 1]) for n in range(start, end + 1)]


def render(report, stream: TextIO, **_options) -> None:
    import jinja2

    from mpdoctor.registry import get_rule

    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(os.fspath(_template_dir())),
                                     autoescape=True, undefined=jinja2.ChainableUndefined)
    diagnostics = []
    for d in report.diagnostics:
        item = diagnostic_to_dict(d)
        item["why"] = get_rule(d.code).why.split("\n\n")[0]
        item["snippet"] = _snippet(d.location.path, d.location.line)
        diagnostics.append(item)
    stream.write(environment.get_template("report.html.j2").render(
        version=__version__, summary=report.summary(), diagnostics=diagnostics, errors=report.errors,
        traces=report.traces))
