"""Terminal output: `path:line:col: MP401 [*] message` (`[*]`: `--fix` fixes it; unsafe fixes are only counted in
the summary), then a summary line (ruff style). Paths and messages carry text from user code and the file system
(layer names, exception texts, file names): their control characters are escaped (mpdoctor.printable), so one
finding is one line and nothing in it can drive the terminal."""

from __future__ import annotations

from typing import Any, TextIO

from mpdoctor.diagnostics import Location, Report, Severity
from mpdoctor.printable import escape_controls as _safe
from mpdoctor.report.counts import fixable_parts, plural

_SEVERITY_COLOUR = {Severity.ERROR: "31", Severity.WARNING: "33", Severity.INFO: "34"}


def _paint(text: str, code: str, colour: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if colour else text


def where_text(loc: Location) -> str:
    """`path:line:col`, or `notebook.ipynb:cell 3:line 2:col 5` for a notebook."""
    if loc.cell is not None:
        return f"{_safe(loc.path)}:cell {loc.cell}:line {loc.line}:col {loc.column}"
    return f"{_safe(loc.path)}:{loc.line}:{loc.column}"


def _fix_location(location: Location) -> str:
    """Where a fix that was not applied belongs: `model.py:12`, `demo.ipynb:cell 3:line 5`."""
    if location.cell is not None:
        return f"{location.path}:cell {location.cell}:line {location.line}"
    return f"{location.path}:{location.line}"


def not_applied_lines(result: Any) -> list[str]:
    """One line per fix of a file's fix result (mpdoctor.fix.results.FileFix) that was not applied, with why."""
    return [
        _safe(f"{_fix_location(d.location)}: {d.code} fix not applied: {reason}") for d, reason in result.not_applied
    ]


def render(
    report: Report,
    stream: TextIO,
    *,
    colour: bool = False,
    statistics: bool = False,
    quiet: bool = False,
    verbose: bool = False,
    **_options: object,
) -> None:
    _findings(report, stream, colour, verbose)
    for result in report.fixes or ():
        stream.writelines(line + "\n" for line in not_applied_lines(result))
    if statistics and report.diagnostics:
        _statistics(report, stream)
    if quiet:
        return
    for line in target_lines(report):
        stream.write(line + "\n")
    if report.fixes is not None:
        _fix_summary(report, report.fixes, stream, colour)
    line, paint = _summary(report)
    stream.write(_paint(line, paint, colour) + "\n")


def _findings(report: Report, stream: TextIO, colour: bool, verbose: bool) -> None:
    for d in report.diagnostics:
        loc = d.location
        where = _paint(f"{where_text(loc)}:", "1", colour)
        code = _paint(d.code, "1;" + _SEVERITY_COLOUR[d.severity], colour)
        marker = " [*]" if d.fix is not None and d.fix.applicability == "safe" else ""  # what --fix would do
        stream.write(f"{where} {code}{marker} {_safe(d.message)}\n")
        if verbose:  # the notes: why the trace confirmed or doubted a finding, mpdoctor's own tracebacks
            for note in d.notes:
                stream.write("".join(f"    {_safe(line)}\n" for line in f"note: {note}".splitlines()))


def _statistics(report: Report, stream: TextIO) -> None:
    """--statistics: findings per code, most first, `[*]` where --fix fixes some."""
    from mpdoctor.registry import get_rule

    fixable: dict[str, int] = {}
    for d in report.diagnostics:
        fixable[d.code] = fixable.get(d.code, 0) + (d.fix is not None and d.fix.applicability == "safe")
    for code, count in sorted(report.by_code().items(), key=lambda kv: (-kv[1], kv[0])):
        marker = "[*]" if fixable[code] else "   "
        stream.write(f"{count:>5}  {code}  {marker} {get_rule(code).name}\n")


def _summary(report: Report) -> tuple[str, str]:
    """The summary line and its colour."""
    counts = report.counts()
    total = len(report.diagnostics)
    files = "the live model" if report.live_model else plural(report.files_checked, "file")
    unchecked = report.unchecked()
    # Files left out must never read as a pass: "could not be checked" whenever one was unreadable or unparsable.
    not_checked = f" {plural(unchecked, 'file')} could not be checked." if unchecked else ""
    skipped = f"; {len(report.skipped)} skipped" if report.skipped else ""
    if total == 0:
        baselined = f"; {report.baselined} baselined" if report.baselined else ""
        if unchecked:
            return f"No problems found ({files} checked{skipped}{baselined});{not_checked}", "1"
        if not (report.files_checked or report.live_model):  # an empty folder, nothing but excluded files
            return f"No Python files found ({files} checked{skipped}{baselined}).", "1"
        return f"All checks passed ({files} checked{skipped}{baselined}).", "32"
    parts = [plural(counts[s.value], s.value) for s in Severity if counts[s.value]]
    line = f"Found {plural(total, 'problem')} ({', '.join(parts)}) in {files}{skipped}.{not_checked}"
    if report.baselined:
        line += f" {report.baselined} more in the baseline."
    fixable = fixable_parts(report)
    if fixable:
        line += " " + ", ".join(fixable) + "."
    return line, "1"


def target_lines(report: Report) -> list[str]:
    """Once per run, each target that differs from the installed environment (the findings assume it)."""
    counts: dict[str, int] = {}
    installed = None
    for target in report.targets.values():
        if target.differs_from_installed:
            counts[target.summary()] = counts.get(target.summary(), 0) + 1
            installed = installed or target.installed
    if not counts:
        return []
    here = f"TensorFlow {installed[0]}.{installed[1]}" if installed else "no TensorFlow"
    return [  # a target's text quotes project files (and, in `merge`, a report that may be forged)
        _safe(
            f"Target: {summary} ({plural(count, 'file')}); installed here: {here} (mpdoctor check --show-target FILE)"
        )
        for summary, count in sorted(counts.items())
    ]


def _fix_summary(report: Report, fixes: list[Any], stream: TextIO, colour: bool) -> None:
    """`fixes`: the report's (mpdoctor.fix.results.FileFix per file)."""
    for result in fixes:
        if result.notebook:  # shown, never written: the diff is the fix
            stream.write(
                _safe(f"{result.shown}: {plural(len(result.in_diff), 'fix')} not applied: {result.error}") + "\n"
            )
            stream.write(result.diff())
    # The findings check counted as fixable, as it counted them; those the fixes uncovered (a second round) apart.
    for result in fixes:
        if result.written:
            more = result.uncovered_count
            line = (
                f"Fixed {plural(len(result.found), 'problem')} in {_safe(result.shown)} ({_safe(result.verification)})"
            )
            line += f"; a second round fixed {more} more that the fixes uncovered." if more else "."
            stream.write(_paint(line, "32", colour) + "\n")
    fixed = sum(len(r.found) for r in fixes if r.written)
    uncovered = sum(r.uncovered_count for r in fixes if r.written)
    more = f" (and {uncovered} that the fixes uncovered)" if uncovered else ""
    stream.write(f"{plural(fixed, 'problem')} fixed{more}, {len(report.diagnostics)} remaining.\n")
