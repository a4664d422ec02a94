"""`check --diff`: the unified diff of every file a --fix would change, on stdout; what would not be applied and a
summary on stderr (the fixes themselves are planned by mpdoctor.fix before this renders them)."""

from __future__ import annotations

from typing import TextIO

from mpdoctor.diagnostics import Diagnostic, Report
from mpdoctor.printable import escape_controls
from mpdoctor.report.counts import plural
from mpdoctor.report.text import not_applied_lines


def write_diffs(report: Report, stream: TextIO, errors: TextIO, *, unsafe: bool) -> int:
    """--diff: the unified diff of every file a --fix would change on `stream`, what would not be applied and a
    summary on `errors`; returns how many fixes the diffs hold."""
    count = uncovered = in_cells = 0
    for result in report.fixes or ():
        diff = result.diff()
        if diff:
            stream.write(diff if diff.endswith("\n") else diff + "\n")
            if result.notebook:  # shown, never written: its error says so
                in_cells += len(result.in_diff)
                errors.write(escape_controls(f"{result.shown}: {result.error}") + "\n")
            else:
                count += len(result.found)
                uncovered += result.uncovered_count
        errors.writelines(line + "\n" for line in not_applied_lines(result))
    hidden = 0 if unsafe else sum(1 for d in report.diagnostics if _unsafe(d))
    # The findings check counted, as it counted them; those the fixes uncover (a second round) apart.
    more = f" (a second round would fix {uncovered} more that these fixes uncover)" if uncovered else ""
    parts = [f"Would fix {plural(count, 'problem')}{more}."] if count or uncovered else []
    if in_cells:
        parts.append(f"{plural(in_cells, 'fix')} for notebook cells shown, not applied.")
    summary = " ".join(parts) or "No fixes available."
    if hidden:
        summary += f" {hidden} more with --unsafe-fixes."
    errors.write(summary + "\n")
    return count + uncovered + in_cells


def _unsafe(d: Diagnostic) -> bool:
    fix = d.fix or d.cell_fix
    return fix is not None and fix.applicability == "unsafe"
