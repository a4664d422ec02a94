"""Apply fix edits to source text. Edits are data (mpdoctor.diagnostics.Edit); this is the one place they are
applied."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from mpdoctor.diagnostics import Diagnostic, Edit
from mpdoctor.printable import escape_controls

# Lines as ast numbers them: only \r\n, \r and \n end a line (str.splitlines also splits on \f, \x1c, \u2028...).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


class EditConflict(ValueError):
    """Two different edits touch overlapping ranges of the same text."""


def edit_spans(text: str, edits: Iterable[Edit]) -> list[tuple[int, int, str]]:
    """(start, end, content) character offsets of the edits, identical ones once, sorted by position."""
    starts = [0]
    for line in _LINE.findall(text):
        starts.append(starts[-1] + len(line))

    def offset(line: int, column: int) -> int:
        if line - 1 >= len(starts):
            return len(text)
        return min(starts[line - 1] + column - 1, len(text))

    return sorted({(offset(e.line, e.column), offset(e.end_line, e.end_column), e.content) for e in edits})


def overlaps(spans: list[tuple[int, int, str]], others: list[tuple[int, int, str]]) -> bool:
    """Whether a span of one list clashes with a different span of the other: ranges that overlap, an insertion
    inside a range, or two edits starting at the same point (their order would be arbitrary)."""
    return any(a != b and (a[0] == b[0] or (a[0] < b[1] and b[0] < a[1])) for a in spans for b in others)


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """Apply edits (1-based lines and character columns, end exclusive), identical edits once, last first."""
    previous_start = None
    for start, end, content in reversed(edit_spans(text, edits)):
        if previous_start is not None and end > previous_start:
            raise EditConflict(f"overlapping edits at offsets {start}-{end} and {previous_start}")
        text = text[:start] + content + text[end:]
        previous_start = start
    return text


def apply_fixes(text: str, diagnostics: Iterable[Diagnostic]) -> str:
    """Apply the edits of every diagnostic that carries a fix."""
    return apply_edits(text, [e for d in diagnostics if d.fix for e in d.fix.edits])


def unified_diff(before: str, after: str, shown: str, part: str = "") -> str:
    """The change as a unified diff with git's `a/` and `b/` names (an absolute path without its leading slash, as
    `git diff --no-index` prints it); `part` names where in the file (a notebook's cell)."""
    name = escape_controls(shown).lstrip("/")  # the file's lines are its own business; its name is printed as text
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{name}{part}", f"b/{name}{part}"
        )
    )
