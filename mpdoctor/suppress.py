"""`# noqa: MP401`, `# mpdoctor: ignore[MP401]` (line) and `# mpdoctor: ignore-file[...]` (file) comments.

Only comments naming MP codes (or the bare `# mpdoctor: ignore`) are ours: a bare `# noqa` or `# noqa: E501`
belongs to other linters and is neither honoured nor reported as unused.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

_NOQA = re.compile(r"#\s*noqa\s*:\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*)", re.IGNORECASE)
_IGNORE = re.compile(r"#\s*mpdoctor\s*:\s*ignore(?P<file>-file)?(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)
ALL = "*"


@dataclass
class Suppression:
    line: int
    column: int  # 1-based column of the comment's `#`
    end_column: int
    codes: tuple[str, ...]  # MP codes, or (ALL,)
    file_level: bool
    comment: str
    only_ours: bool  # the comment holds nothing but this directive: removing it loses nothing else
    used: set[str] = field(default_factory=set)

    def matches(self, code: str) -> bool:
        return ALL in self.codes or code in self.codes


def _split_codes(text: str) -> tuple[str, ...]:
    return tuple(c.upper() for c in re.split(r"[\s,]+", text.strip()) if c)


def find_suppressions(source: str) -> list[Suppression]:
    found: list[Suppression] = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return found
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        line, col = tok.start
        end_col = tok.end[1] + 1
        for match in _NOQA.finditer(tok.string):
            all_codes = _split_codes(match["codes"])
            codes = tuple(c for c in all_codes if c.startswith("MP"))
            if codes:
                only_ours = len(codes) == len(all_codes) and match.group(0) == tok.string.rstrip()
                found.append(Suppression(line, col + 1, end_col, codes, False, tok.string, only_ours))
        for match in _IGNORE.finditer(tok.string):
            codes = _split_codes(match["codes"]) if match["codes"] else (ALL,)
            found.append(
                Suppression(
                    line,
                    col + 1,
                    end_col,
                    codes or (ALL,),
                    bool(match["file"]),
                    tok.string,
                    match.group(0) == tok.string.rstrip(),
                )
            )
    return found


def is_suppressed(suppressions: list[Suppression], code: str, lines: tuple[int, ...]) -> bool:
    """Mark and report whether a diagnostic of `code` spanning `lines` is suppressed."""
    hit = False
    for s in suppressions:
        if (s.file_level or s.line in lines) and s.matches(code):
            s.used.add(code)
            hit = True
    return hit
