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
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from markupsafe import Markup, escape

from mpdoctor._version import __version__
from mpdoctor.facts.artifacts import SavedModelInfo
from mpdoctor.facts.hardware import slow_hardware
from mpdoctor.facts.schema import Environment, TraceSummary
from mpdoctor.report.json_format import diagnostic_to_dict

if TYPE_CHECKING:
    from collections.abc import Iterable

    from mpdoctor.diagnostics import Diagnostic, Location, Report, SourceText

_SNIPPET_CONTEXT = 2
_AUDIT_ROWS = 200  # rows of one checkpoint's audit table; problems first, the rest is counted
_Context = dict[str, Any]  # what the template reads of one item (a card, a model, a checkpoint...)


def _template_dir() -> Path:
    """Where the templates are: the installed `mpdoctor._templates` (a namespace package: no __init__.py, so
    importlib.resources gives a MultiplexedPath, not a directory name), else the source checkout's."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("mpdoctor._templates")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(location) / "report.html.j2").is_file():
            return Path(location)
    return Path(__file__).resolve().parents[2] / "reports" / "templates"  # a source checkout


def _location_text(sources: dict[str, SourceText], location: Location) -> str | None:
    """The text a location's line counts in: the file, or for a notebook finding the lines of its cell."""
    source = sources.get(location.path)
    return source.text_of(location.cell) if source is not None else None


def _snippet(text: str | None, line: int) -> list[tuple[int, str]]:
    if text is None:
        return []
    lines = text.splitlines()
    start, end = max(1, line - _SNIPPET_CONTEXT), min(len(lines), line + _SNIPPET_CONTEXT)
    return [(n, lines[n - 1]) for n in range(start, end + 1)]


def fix_diff(diagnostic: Diagnostic, sources: dict[str, SourceText]) -> list[tuple[str, str]]:
    """The fix as unified-diff lines [(kind, text)], kind in file|hunk|add|remove|context; [] when it cannot be
    shown. A notebook's (or a %%mpdoctor cell's) fix is a diff of its cell."""
    from mpdoctor.fix.apply import EditConflict, apply_edits

    if diagnostic.fix is None:
        return _cell_fix_diff(diagnostic, sources)
    lines: list[tuple[str, str]] = []
    for path in dict.fromkeys(e.path for e in diagnostic.fix.edits):
        source = sources.get(path)
        if source is None or source.cells is not None:
            return []
        before = source.text
        try:
            after = apply_edits(before, [e for e in diagnostic.fix.edits if e.path == path])
        except EditConflict:
            return []
        lines += _classified(
            difflib.unified_diff(
                before.splitlines(),
                after.splitlines(),
                "a/" + path.lstrip("/"),
                "b/" + path.lstrip("/"),
                n=1,
                lineterm="",
            )
        )
    return lines


def _cell_fix_diff(diagnostic: Diagnostic, sources: dict[str, SourceText]) -> list[tuple[str, str]]:
    from mpdoctor.fix.apply import EditConflict, apply_edits

    fix, path = diagnostic.cell_fix, diagnostic.location.path
    source = sources.get(path)
    if fix is None or source is None:
        return []
    before = source.text_of(fix.cell)
    if before is None:
        return []
    try:
        after = apply_edits(before + "\n", fix.edits)
    except EditConflict:
        return []
    label = f"{path.lstrip('/')} (cell {fix.cell})" if source.cells is not None else path.lstrip("/")
    return _classified(
        difflib.unified_diff(
            (before + "\n").splitlines(), after.splitlines(), f"a/{label}", f"b/{label}", n=1, lineterm=""
        )
    )


def _classified(diff_lines: Iterable[str]) -> list[tuple[str, str]]:
    return [
        (
            "file"
            if text.startswith(("---", "+++"))
            else "hunk"
            if text.startswith("@@")
            else "add"
            if text.startswith("+")
            else "remove"
            if text.startswith("-")
            else "context",
            text.rstrip("\n"),
        )
        for text in diff_lines
    ]


def _fixes(report: Report) -> list[_Context]:
    """What --fix did (or --diff would do) to each file, and whether a re-trace verified it."""
    return [
        {
            "path": result.shown,
            "verification": result.verification,
            "written": result.written,
            "error": result.error,
            "applied": [(d.code, d.location.line, d.fix.description if d.fix else "") for d in result.applied],
            "not_applied": [(d.code, d.location.line, reason) for d, reason in result.not_applied],
            "diff": _classified(result.diff().splitlines()),
        }
        for result in getattr(report, "fixes", None) or []
    ]


def _card(diagnostic: Diagnostic, sources: dict[str, SourceText]) -> _Context:
    from mpdoctor.registry import get_rule

    item = diagnostic_to_dict(diagnostic)
    item["why"] = get_rule(diagnostic.code).why.split("\n\n")[0]
    item["snippet"] = _snippet(_location_text(sources, diagnostic.location), diagnostic.location.line)
    item["diff"] = fix_diff(diagnostic, sources)
    fix = diagnostic.cell_fix
    item["cell_fix"] = (
        {"description": fix.description, "applicability": fix.applicability, "notebook": diagnostic.location.cell}
        if fix is not None
        else None
    )
    return item


def _environments(traces: list[TraceSummary]) -> list[_Context]:
    """Each distinct environment the trace ran in, with whether its devices run float16 / bfloat16 fast (the fact
    MP603 reports when selected: shown here whether or not it is)."""
    seen: list[Environment] = []
    for trace in traces:
        if trace.environment is not None and trace.environment not in seen:
            seen.append(trace.environment)
    return [
        {
            "env": env,
            "files": [trace.path for trace in traces if trace.environment == env],
            "slow": {dtype: slow_hardware(env, dtype) for dtype in ("float16", "bfloat16")},
        }
        for env in seen
    ]


def _models(traces: list[TraceSummary], finding_layers: dict[str, set[str]]) -> list[_Context]:
    from mpdoctor.report.graph_svg import model_figures
    from mpdoctor.report.numerics_svg import numerics_svg

    models: list[_Context] = []
    for trace in traces:
        for model in trace.models:
            graph, numerics = model.graph, model.numerics
            figures: list[_Context] = []
            if graph is not None and not model.failed_build:
                plan = {layer.id for layer in model.plan.layers} if model.plan is not None else set()
                for figure in model_figures(graph, finding_layers.get(trace.path, set()), plan):
                    figures.append(
                        {
                            "title": figure.title,
                            "layers": figure.layers,
                            "boxes": figure.boxes,
                            "svg": Markup(figure.svg),
                        }
                    )  # built escaped by graph_svg
            chart = numerics_svg(numerics) if numerics is not None and not numerics.skipped else None
            models.append(
                {
                    "path": trace.path,
                    "name": model.name,
                    "how": model.how,
                    "graph": graph,
                    "figures": figures,
                    "numerics": numerics,
                    "numerics_svg": Markup(chart) if chart else None,
                    # the run raised while building it: no partial graph, no "skipped" numerics, the reason
                    "failed_build": _sentence(trace.exception or "the run raised") if model.failed_build else None,
                }
            )
    return models


def _savedmodels(traces: list[TraceSummary]) -> list[_Context]:
    by_path: dict[str | None, _Context] = {}  # a load without a path has its handle, or neither
    for trace in traces:
        for load in trace.savedmodels:
            savedmodel = load.savedmodel or SavedModelInfo()
            key = savedmodel.path or load.handle
            entry = by_path.setdefault(key, {"path": key, "apis": [], "savedmodel": savedmodel})
            if load.api not in entry["apis"]:
                entry["apis"].append(load.api)
    return list(by_path.values())


def _checkpoints(traces: list[TraceSummary]) -> list[_Context]:
    audits: list[_Context] = []
    for trace in traces:
        for restore in trace.checkpoints:
            rows = sorted(restore.audit.variables if restore.audit else [], key=lambda r: (r.status == "ok", r.key))
            audits.append(
                {
                    "api": restore.api,
                    "path": restore.path,
                    "location": restore.location,
                    "audit": restore.audit,
                    "audit_error": restore.audit_error,
                    "rows": rows[:_AUDIT_ROWS],
                    "more": max(0, len(rows) - _AUDIT_ROWS),
                    "summary": restore.audit.summary if restore.audit else {},
                }
            )
    return audits


def _sentence(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else text + "."


_INLINE_CODE = re.compile(r"`([^`\n]+)`")


def inline_code(text: object) -> Markup:
    """Text whose `backticks` mark code, as HTML: escaped, each `...` a <code> element."""
    return Markup(_INLINE_CODE.sub(r"<code>\1</code>", str(escape(str(text)))))


def _script_hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def render(report: Report, stream: TextIO, **_options: object) -> None:
    import jinja2

    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(os.fspath(_template_dir())), autoescape=True, undefined=jinja2.ChainableUndefined
    )
    environment.filters["code"] = inline_code
    from mpdoctor.report.counts import fixable_parts

    sources = report.sources
    # Errors first, info last; within a severity, in file order.
    ordered = sorted(report.diagnostics, key=lambda d: (-d.severity.rank, d.sort_key()))
    diagnostics = [_card(d, sources) for d in ordered]
    finding_layers: dict[str, set[str]] = {}
    for d in report.diagnostics:
        if d.location.layer:
            finding_layers.setdefault(d.location.path, set()).add(d.location.layer)
    script = (_template_dir() / "report.js").read_text(encoding="utf-8")
    stream.write(
        environment.get_template("report.html.j2").render(
            version=__version__,
            summary=report.summary(),
            live_model=report.live_model,
            fixable=fixable_parts(report, marker=False, shown_cells=True),
            diagnostics=diagnostics,
            errors=report.errors,
            traces=report.traces,
            environments=_environments(report.traces),
            models=_models(report.traces, finding_layers),
            savedmodels=_savedmodels(report.traces),
            checkpoints=_checkpoints(report.traces),
            fixes=_fixes(report),
            script=script,
            script_hash=_script_hash(script),
        )
    )
