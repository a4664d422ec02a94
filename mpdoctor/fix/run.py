"""`check --fix` / `--diff` over a whole report: every file's fixes planned (and with --fix written); the report then
lists what remains and what was done (report.fixes)."""

from __future__ import annotations

from dataclasses import replace

from mpdoctor.config import Config
from mpdoctor.diagnostics import Diagnostic
from mpdoctor.fix.files import fix_file, withdraw_refused
from mpdoctor.fix.notebooks import notebook_fix
from mpdoctor.fix.results import FileFix
from mpdoctor.fix.rounds import wanted
from mpdoctor.fix.writing import write_fixed


def fix_report(report, config: Config, trace, *, unsafe: bool, write: bool) -> None:
    """Plan (and with `write`, apply) the fixes of every file in the report; the report then lists what remains
    (and, for a file written, keeps its new text)."""
    by_file: dict[str, list[Diagnostic]] = {}
    for d in report.diagnostics:
        by_file.setdefault(d.location.path, []).append(d)
    results = []
    remaining: list[Diagnostic] = []
    for shown, diagnostics in by_file.items():
        source = report.sources.get(shown)
        if source is not None and source.cells is not None:  # a notebook: its fixes are shown, never applied
            shown_fix = notebook_fix(shown, source, diagnostics, unsafe)
            if shown_fix is not None:
                results.append(shown_fix)
            remaining += diagnostics
            continue
        if source is None or not any(wanted(d, unsafe) for d in diagnostics):
            remaining += diagnostics
            continue
        result = fix_file(
            source.path, shown, source.text, diagnostics, config, trace, unsafe, report.contexts.get(shown)
        )
        refused = list(result.not_applied)
        if write and result.changed:
            _write(report, shown, source, result)
        if not result.written:
            _unwritten(result, diagnostics, write)
        withdraw_refused(result, refused)
        remaining += result.remaining if result.remaining is not None else diagnostics
        results.append(result)
    report.diagnostics = sorted(remaining, key=Diagnostic.sort_key)
    report.fixes = results


def _write(report, shown: str, source, result: FileFix) -> None:
    """Write a fixed file; the report keeps its new text (why not in result.error)."""
    error = write_fixed(source.path, source.text, result.fixed, shown)
    if error is None:
        result.written = True
        report.sources[shown] = replace(source, text=result.fixed)
    else:
        result.error = error


def _unwritten(result: FileFix, diagnostics: list[Diagnostic], write: bool) -> None:
    """A file left as it was: what a failed write would have applied is not applied, and with --fix (or when the
    fixes were not re-checked) its findings are those it has."""
    if result.error and result.applied:
        result.not_applied += [(d, result.error) for d in result.applied]
        result.applied = []
    if write or result.remaining is None:
        result.remaining = diagnostics
