"""How many findings can be fixed, and how, in the same words for every renderer that says it (the text summary
line and the HTML report's summary must agree)."""

from __future__ import annotations

from mpdoctor.diagnostics import Report


def fixable_parts(report: Report, *, marker: bool = True, shown_cells: bool = False) -> list[str]:
    """["2 fixable with --fix ([*])", "1 more with --unsafe-fixes", "1 fix for notebook cells (--diff shows it)"].

    Safe and unsafe fixes are counted separately, as `--fix` and `--fix --unsafe-fixes` apply them. Fixes of notebook
    cells are never applied: counted apart. `shown_cells`: also count the fixes of a checked cell that has no file
    to fix (a `%%mpdoctor` cell), which the HTML report shows as diffs; the text never suggests a command for them.
    """
    safe = sum(1 for d in report.diagnostics if d.fix is not None and d.fix.applicability == "safe")
    unsafe = sum(1 for d in report.diagnostics if d.fix is not None and d.fix.applicability == "unsafe")
    in_notebooks = sum(1 for d in report.diagnostics if d.cell_fix is not None and d.location.cell is not None)
    in_cell = sum(1 for d in report.diagnostics if d.cell_fix is not None and d.location.cell is None)
    parts = [f"{safe} fixable with --fix" + (" ([*])" if marker else "")] if safe else []
    if unsafe:
        parts.append(f"{unsafe} {'more ' if safe else 'fixable '}with --unsafe-fixes")
    if in_notebooks:
        parts.append(
            f"{plural(in_notebooks, 'fix')} for notebook cells (--diff shows {'it' if in_notebooks == 1 else 'them'})"
        )
    if in_cell and shown_cells:
        parts.append(f"{plural(in_cell, 'fix')} shown as {'a diff' if in_cell == 1 else 'diffs'} of the cell")
    return parts


def outcome(report: Report) -> str:
    """The run in a few words, for a line beside a written report: "3 problems in 2 files", "no problems in 1 file;
    1 file could not be checked"."""
    found = plural(len(report.diagnostics), "problem") if report.diagnostics else "no problems"
    line = f"{found} in {plural(report.files_checked, 'file')}"
    unchecked = report.unchecked()
    if unchecked:
        line += f"; {plural(unchecked, 'file')} could not be checked"
    return line


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else ('es' if word.endswith('x') else 's')}"
