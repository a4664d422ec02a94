"""Apply fix edits to source text. Edits are data (mpdoctor.diagnostics.Edit); this is the one place they are applied."""

from __future__ import annotations

from typing import Iterable

from mpdoctor.diagnostics import Diagnostic, Edit


class EditConflict(ValueError):
    """Two different edits touch overlapping ranges of the same text."""


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """Apply edits (1-based lines and character columns, end exclusive), identical edits once, last first."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(line: int, column: int) -> int:
        if line - 1 >= len(starts):
            return len(text)
        return starts[line - 1] + column - 1

    spans = sorted({(offset(e.line, e.column), offset(e.end_line, e.end_column), e.content) for e in edits},
                   reverse=True)
    previous_start = None
    for start, end, content in spans:
        if previous_start is not None and end > previous_start:
            raise EditConflict(f"overlapping edits at offsets {start}-{end} and {previous_start}")
        text = text[:start] + content + text[end:]
        previous_start = start
    return text


def apply_fixes(text: str, diagnostics: Iterable[Diagnostic]) -> str:
    """Apply the edits of every diagnostic that carries a fix."""
    return apply_edits(text, [e for d in diagnostics if d.fix for e in d.fix.edits])
