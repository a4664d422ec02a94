"""A notebook's cell fixes: applied to copies of their cells and shown as diffs, never written (the edits are lines
of cells; the .ipynb file is JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from mpdoctor.diagnostics import Diagnostic
from mpdoctor.fix.apply import apply_edits, edit_spans, overlaps, unified_diff
from mpdoctor.fix.results import FileFix

NOT_IN_NOTEBOOKS = "fixes are shown but not applied to notebooks: apply the diff to the cell"


@dataclass
class NotebookFix(FileFix):
    """What --fix/--diff show for a notebook: the cell fixes as diffs of the cells, never written (the edits are
    lines of cells; the .ipynb file is JSON)."""

    notebook: ClassVar[bool] = True

    cells: dict[int, tuple[str, str]] = field(default_factory=dict)  # cell -> (its text, the text with the fixes)
    in_diff: list[Diagnostic] = field(default_factory=list)  # the findings whose cell fixes the diffs hold

    @property
    def changed(self) -> bool:
        return any(before != after for before, after in self.cells.values())

    def diff(self) -> str:
        return "".join(
            unified_diff(before, after, self.shown, f" (cell {cell})")
            for cell, (before, after) in sorted(self.cells.items())
        )

    def to_dict(self) -> dict:
        data = super().to_dict()
        data["shown"] = [
            {"code": d.code, "cell": d.cell_fix.cell, "line": d.location.line, "description": d.cell_fix.description}
            for d in self.in_diff
        ]
        return data


def notebook_fix(shown: str, source, diagnostics: list[Diagnostic], unsafe: bool) -> NotebookFix | None:
    """The cell fixes of a notebook's findings applied to copies of their cells, one round (a fix whose edits clash
    with an earlier one in the same cell waits: it is listed as not applied)."""
    candidates = [
        d
        for d in diagnostics
        if d.cell_fix is not None and d.cell_fix.edits and (unsafe or d.cell_fix.applicability == "safe")
    ]
    if not candidates:
        return None
    result = NotebookFix(shown, "", "", error=NOT_IN_NOTEBOOKS, verification="not applied (notebook)")
    taken: dict[int, list[tuple[Diagnostic, list]]] = {}
    for d in sorted(candidates, key=lambda d: (d.cell_fix.cell, d.location.line, d.location.column, d.code)):
        cell = d.cell_fix.cell
        text = source.text_of(cell)
        if text is None:
            continue
        text += "\n"
        spans = edit_spans(text, d.cell_fix.edits)
        if any(overlaps(spans, other) for _, other in taken.get(cell, [])):
            result.not_applied.append((d, "clashes with another fix of the cell: apply that one first"))
            continue
        taken.setdefault(cell, []).append((d, spans))
    for cell, fixes in taken.items():
        before = source.text_of(cell) + "\n"
        result.cells[cell] = (before, apply_edits(before, [e for d, _ in fixes for e in d.cell_fix.edits]))
        result.in_diff += [d for d, _ in fixes]
    return result
