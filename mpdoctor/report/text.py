"""Terminal output: `path:line:col: MP401 [*] message` (`[*]`: `--fix` fixes it; unsafe fixes are only counted in
the summary), then a summary line (ruff style)."""

from __future__ import annotations

from typing import TextIO

from mpdoctor.diagnostics import Severity

_SEVERITY_COLOUR = {Severity.ERROR: "31", Severity.WARNING: "33", Severity.INFO: "34"}


def _paint(text: str, code: str, colour: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if colour else text


def where_text(loc) -> str:
    """`path:line:col`, or `notebook.ipynb:cell 3:line 2:col 5` for a notebook."""
    if loc.cell is not None:
        return f"{loc.path}:cell {loc.cell}:line {loc.line}:col {loc.column}"
    return f"{loc.path}:{loc.line}:{loc.column}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def render(
    report,
    stream: TextIO,
    *,
    colour: bool = False,
    statistics: bool = False,
    quiet: bool = False,
    verbose: bool = False,
    **_options,
) -> None:
    for d in report.diagnostics:
        loc = d.location
        where = _paint(f"{where_text(loc)}:", "1", colour)
        code = _paint(d.code, "1;" + _SEVERITY_COLOUR[d.severity], colour)
        marker = " [*]" if d.fix is not None and d.fix.applicability == "safe" else ""  # what --fix would do
        stream.write(f"{where} {code}{marker} {d.message}\n")
        if verbose:  # the notes: why the trace confirmed or doubted a finding, mpdoctor's own tracebacks
            for note in d.notes:
                stream.write("".join(f"    {line}\n" for line in f"note: {note}".splitlines()))
    for result in report.fixes or ():
        for d, reason in result.not_applied:
            stream.write(f"{d.location.path}:{d.location.line}: {d.code} fix not applied: {reason}\n")
    if statistics and report.diagnostics:
        from mpdoctor.registry import get_rule

        fixable: dict[str, int] = {}
        for d in report.diagnostics:
            fixable[d.code] = fixable.get(d.code, 0) + (d.fix is not None and d.fix.applicability == "safe")
        for code, count in sorted(report.by_code().items(), key=lambda kv: (-kv[1], kv[0])):
            marker = "[*]" if fixable[code] else "   "
            stream.write(f"{count:>5}  {code}  {marker} {get_rule(code).name}\n")
    if quiet:
        return
    if report.fixes is not None:
        _fix_summary(report, stream, colour)
    counts = report.counts()
    total = len(report.diagnostics)
    files = _plural(report.files_checked, "file")
    if total == 0:
        baselined = f"; {report.baselined} baselined" if report.baselined else ""
        stream.write(_paint(f"All checks passed ({files} checked{baselined}).", "32", colour) + "\n")
        return
    parts = [_plural(counts[s.value], s.value) for s in Severity if counts[s.value]]
    line = f"Found {_plural(total, 'problem')} ({', '.join(parts)}) in {files}."
    if report.baselined:
        line += f" {report.baselined} more in the baseline."
    if report.fixable():
        unsafe = sum(1 for d in report.diagnostics if d.fix is not None and d.fix.applicability == "unsafe")
        safe = report.fixable() - unsafe
        parts = [f"{safe} fixable with --fix ([*])"] if safe else []
        if unsafe:
            parts.append(f"{unsafe} {'more ' if safe else 'fixable '}with --unsafe-fixes")
        line += " " + ", ".join(parts) + "."
    stream.write(_paint(line, "1", colour) + "\n")


def _fix_summary(report, stream: TextIO, colour: bool) -> None:
    for result in report.fixes:
        if result.written:
            stream.write(
                _paint(
                    f"Fixed {_plural(len(result.applied), 'problem')} in {result.shown} ({result.verification}).",
                    "32",
                    colour,
                )
                + "\n"
            )
    fixed = sum(len(r.applied) for r in report.fixes if r.written)
    stream.write(f"{_plural(fixed, 'problem')} fixed, {len(report.diagnostics)} remaining.\n")
