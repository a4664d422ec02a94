"""Self-contained HTML report (jinja2, autoescaped): summary, each traced model's layer graph (SVG), finding cards with
the source line and the fix as a diff, SavedModel signatures, checkpoint range audits and the numerics chart.

One file, no external resources: a Content-Security-Policy of `default-src 'none'` allows inline styles, and one
inline script (graph zoom and drag-to-pan) by its sha256 hash only; the report reads fine without it. Templates live
in reports/templates/ and ship inside the wheel as `mpdoctor._templates`.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import os
from pathlib import Path
from typing import TextIO

from mpdoctor import __version__
from mpdoctor.report.json_format import diagnostic_to_dict

_SNIPPET_CONTEXT = 2
_AUDIT_ROWS = 200  # rows of one checkpoint's audit table; problems first, the rest is counted


def _template_dir() -> Path:
    try:
        from importlib.resources import files

        packaged = files("mpdoctor._templates")
        if packaged.joinpath("report.html.j2").is_file():
            return Path(str(packaged))
    except (ImportError, ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parents[2] / "reports" / "templates"  # a source checkout


def _read_lines(path: str, cache: dict) -> list[str] | None:
    if path not in cache:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                cache[path] = handle.read()
        except OSError:
            cache[path] = None
    return cache[path]


def _location_text(location, cache: dict) -> str | None:
    """The text a location's line counts in: the file, or for a notebook finding the lines of its cell."""
    if location.cell is None:
        return _read_lines(location.path, cache)
    from mpdoctor.notebook import NotebookError, read_notebook

    key = (location.path, "cells")
    if key not in cache:
        try:
            cache[key] = read_notebook(location.path).cell_lines
        except (OSError, NotebookError):
            cache[key] = {}
    lines = cache[key].get(location.cell)
    return None if lines is None else "\n".join(lines)


def _snippet(text: str | None, line: int) -> list[tuple[int, str]]:
    if text is None:
        return []
    lines = text.splitlines()
    start, end = max(1, line - _SNIPPET_CONTEXT), min(len(lines), line + _SNIPPET_CONTEXT)
    return [(n, lines[n - 1]) for n in range(start, end + 1)]


def fix_diff(diagnostic, sources: dict) -> list[tuple[str, str]]:
    """The fix as unified-diff lines [(kind, text)], kind in file|hunk|add|remove|context; [] when it cannot be shown."""
    from mpdoctor.fixes import EditConflict, apply_edits

    if diagnostic.fix is None:
        return []
    lines: list[tuple[str, str]] = []
    for path in dict.fromkeys(e.path for e in diagnostic.fix.edits):
        before = _read_lines(path, sources)
        if before is None:
            return []
        try:
            after = apply_edits(before, [e for e in diagnostic.fix.edits if e.path == path])
        except EditConflict:
            return []
        lines += _classified(difflib.unified_diff(before.splitlines(), after.splitlines(), "a/" + path.lstrip("/"),
                                                  "b/" + path.lstrip("/"), n=1, lineterm=""))
    return lines


def _classified(diff_lines) -> list[tuple[str, str]]:
    return [("file" if text.startswith(("---", "+++")) else "hunk" if text.startswith("@@") else
             "add" if text.startswith("+") else "remove" if text.startswith("-") else "context", text.rstrip("\n"))
            for text in diff_lines]


def _fixes(report) -> list[dict]:
    """What --fix did (or --diff would do) to each file, and whether a re-trace verified it."""
    return [{"path": result.shown, "verification": result.verification, "written": result.written,
             "error": result.error,
             "applied": [(d.code, d.location.line, d.fix.description if d.fix else "") for d in result.applied],
             "not_applied": [(d.code, d.location.line, reason) for d, reason in result.not_applied],
             "diff": _classified(result.diff().splitlines())}
            for result in getattr(report, "fixes", None) or []]


def _card(diagnostic, sources: dict) -> dict:
    from mpdoctor.registry import get_rule

    item = diagnostic_to_dict(diagnostic)
    item["why"] = get_rule(diagnostic.code).why.split("\n\n")[0]
    item["snippet"] = _snippet(_location_text(diagnostic.location, sources), diagnostic.location.line)
    item["diff"] = fix_diff(diagnostic, sources)
    return item


def _environments(traces: list[dict]) -> list[dict]:
    seen = []
    for trace in traces:
        env = trace.get("environment") or {}
        if env and env not in seen:
            seen.append(env)
    return seen


def _models(traces: list[dict], finding_layers: dict[str, set[str]]) -> list[dict]:
    from markupsafe import Markup

    from mpdoctor.report.graph_svg import model_figures
    from mpdoctor.report.numerics_svg import numerics_svg

    models = []
    for trace in traces:
        for model in trace.get("models") or []:
            graph, numerics = model.get("graph"), model.get("numerics")
            figures = []
            if graph:
                for figure in model_figures(graph, finding_layers.get(trace.get("path"), set())):
                    figures.append({"title": figure.title, "layers": figure.layers, "boxes": figure.boxes,
                                    "svg": Markup(figure.svg)})  # built escaped by graph_svg
            chart = numerics_svg(numerics) if numerics and not numerics.get("skipped") else None
            models.append({"path": trace.get("path"), "name": model.get("name"), "how": model.get("how"),
                           "graph": graph, "figures": figures, "numerics": numerics,
                           "numerics_svg": Markup(chart) if chart else None})
    return models


def _savedmodels(traces: list[dict]) -> list[dict]:
    by_path: dict[str, dict] = {}
    for trace in traces:
        for load in trace.get("savedmodels") or []:
            savedmodel = load.get("savedmodel") or {}
            key = savedmodel.get("path") or load.get("handle")
            entry = by_path.setdefault(key, {"path": key, "apis": [], "savedmodel": savedmodel})
            if load.get("api") not in entry["apis"]:
                entry["apis"].append(load.get("api"))
    return list(by_path.values())


def _checkpoints(traces: list[dict]) -> list[dict]:
    audits = []
    for trace in traces:
        for restore in trace.get("checkpoints") or []:
            audit = restore.get("audit") or {}
            rows = sorted(audit.get("variables") or [], key=lambda r: (r.get("status") == "ok", r.get("key")))
            audits.append({**restore, "rows": rows[:_AUDIT_ROWS], "more": max(0, len(rows) - _AUDIT_ROWS),
                           "summary": audit.get("summary") or {}})
    return audits


def _script_hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def render(report, stream: TextIO, *, sources: dict | None = None, **_options) -> None:
    """`sources`: source text by path, for findings in files that are gone (a checked notebook cell)."""
    import jinja2

    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(os.fspath(_template_dir())),
                                     autoescape=True, undefined=jinja2.ChainableUndefined)
    sources = dict(sources or {})
    diagnostics = [_card(d, sources) for d in report.diagnostics]
    finding_layers: dict[str, set[str]] = {}
    for d in report.diagnostics:
        if d.location.layer:
            finding_layers.setdefault(d.location.path, set()).add(d.location.layer)
    script = (_template_dir() / "report.js").read_text(encoding="utf-8")
    stream.write(environment.get_template("report.html.j2").render(
        version=__version__, summary=report.summary(), diagnostics=diagnostics, errors=report.errors,
        traces=report.traces, environments=_environments(report.traces),
        models=_models(report.traces, finding_layers), savedmodels=_savedmodels(report.traces),
        checkpoints=_checkpoints(report.traces), fixes=_fixes(report), script=script, script_hash=_script_hash(script)))
