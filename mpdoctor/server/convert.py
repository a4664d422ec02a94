"""mpdoctor's findings as LSP data: diagnostics (ranges in the client's position encoding, severities, the rule's
documentation, related locations), the quick fixes and noqa comments of code actions, and hover texts from the
registry (what `explain` prints). Pure functions of a document's lines: the server keeps the state."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from lsprotocol import types
from pygls.uris import from_fs_path
from pygls.workspace.position_codec import PositionCodec

from mpdoctor.diagnostics import Diagnostic, Edit, Severity
from mpdoctor.report.sarif import INFORMATION_URI
from mpdoctor.suppress import find_suppressions

SOURCE = "mpdoctor"
RULES_URL = f"{INFORMATION_URI}/blob/main/docs/RULES.md"
FIX_ALL = "source.fixAll.mpdoctor"
_SEVERITIES = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFO: types.DiagnosticSeverity.Information,
}
_SET_AT = re.compile(r"(?P<path>.+):(?P<line>[0-9]+)\Z")  # a policy context's `train.py:14`
UNUSED_SUPPRESSION = "MP002"


def rule_url(code: str) -> str:
    """The rule's entry in the catalogue (a text fragment: its table row has no anchor of its own)."""
    return f"{RULES_URL}#:~:text={code}"


def to_range(
    codec: PositionCodec, lines: Sequence[str], line: int, column: int, end_line: int, end_column: int
) -> types.Range:
    """mpdoctor's 1-based line and character columns (end exclusive) as an LSP range in the client's units."""
    start = types.Position(line=max(line - 1, 0), character=max(column - 1, 0))
    end = types.Position(line=max(end_line - 1, 0), character=max(end_column - 1, 0))
    return codec.range_to_client_units(lines, types.Range(start=start, end=end))


def diagnostic_range(codec: PositionCodec, lines: Sequence[str], d: Diagnostic) -> types.Range:
    """The finding's span; a finding with only a start covers the rest of its line (at least one character)."""
    loc = d.location
    if loc.end_line is not None and loc.end_column is not None:
        return to_range(codec, lines, loc.line, loc.column, loc.end_line, loc.end_column)
    text = lines[loc.line - 1] if 1 <= loc.line <= len(lines) else ""
    end = max(len(text.rstrip("\r\n")) + 1, loc.column + 1)
    return to_range(codec, lines, loc.line, loc.column, loc.line, end)


def to_lsp(codec: PositionCodec, lines: Sequence[str], d: Diagnostic) -> types.Diagnostic:
    message = "\n".join((d.message, *d.notes))
    return types.Diagnostic(
        range=diagnostic_range(codec, lines, d),
        message=message,
        severity=_SEVERITIES[d.severity],
        code=d.code,
        code_description=types.CodeDescription(href=rule_url(d.code)),
        source=SOURCE,
        related_information=related(d) or None,
        tags=[types.DiagnosticTag.Unnecessary] if d.code == UNUSED_SUPPRESSION else None,
    )


def related(d: Diagnostic) -> list[types.DiagnosticRelatedInformation]:
    """Where the finding's policy context comes from: the line that sets the policy (another module for a finding
    of the project analysis), as the message names it."""
    context = d.context
    found = _SET_AT.match(context.set_at) if context is not None and context.set_at else None
    if context is None or found is None:
        return []
    line = int(found["line"]) - 1
    where = types.Location(
        uri=from_fs_path(os.path.abspath(found["path"])) or found["path"],
        range=types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line + 1, character=0)),
    )
    policy = f'policy "{context.policy}"' if context.policy else "the policy"
    return [types.DiagnosticRelatedInformation(location=where, message=f"{policy} set here")]


def text_edits(codec: PositionCodec, lines: Sequence[str], edits: Sequence[Edit]) -> list[types.TextEdit]:
    return [
        types.TextEdit(
            range=to_range(codec, lines, e.line, e.column, e.end_line, e.end_column),
            new_text=e.content,
        )
        for e in edits
    ]


def whole_text_edit(lines: Sequence[str], new_text: str) -> types.TextEdit:
    """One edit replacing the document (as ruff's fix-all): the end is past its last line."""
    end = types.Position(line=len(lines), character=0)
    return types.TextEdit(range=types.Range(start=types.Position(line=0, character=0), end=end), new_text=new_text)


def quick_fix(
    uri: str, codec: PositionCodec, lines: Sequence[str], d: Diagnostic, lsp: types.Diagnostic
) -> types.CodeAction | None:
    """The finding's own fix, preferred when safe; an unsafe one says so in its title."""
    fix = d.fix
    if fix is None or not fix.edits or any(e.path != d.location.path for e in fix.edits):
        return None
    unsafe = fix.applicability != "safe"
    return types.CodeAction(
        title=f"{d.code}: {fix.description}{' (unsafe fix)' if unsafe else ''}",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[lsp],
        is_preferred=not unsafe,
        edit=types.WorkspaceEdit(changes={uri: text_edits(codec, lines, fix.edits)}),
    )


def noqa_action(
    uri: str, codec: PositionCodec, lines: Sequence[str], text: str, d: Diagnostic, lsp: types.Diagnostic
) -> types.CodeAction | None:
    """ "Disable MPxxx for this line": `# noqa: MPxxx` at the end of the finding's first line, or the code added to
    the `# noqa:` comment already there (mpdoctor.suppress reads both)."""
    if d.code == UNUSED_SUPPRESSION or not 1 <= d.location.line <= len(lines):
        return None
    number = d.location.line
    line = lines[number - 1].rstrip("\r\n")
    existing = next(
        (s for s in find_suppressions(text) if s.line == number and not s.file_level and "noqa" in s.comment.lower()),
        None,
    )
    if existing is not None:
        if d.code in existing.codes:
            return None
        comment_start = existing.column - 1
        comment = existing.comment
        codes = re.search(r"noqa\s*:\s*", comment, re.IGNORECASE)
        if codes is None:
            return None
        at = comment_start + codes.end()
        edit = Edit(d.location.path, number, at + 1, number, at + 1, f"{d.code}, ")
    elif _inside_string(text, number):
        return None  # the line ends inside a multi-line string: a comment there would be part of the string
    else:
        column = len(line) + 1
        edit = Edit(d.location.path, number, column, number, column, f"  # noqa: {d.code}")
    return types.CodeAction(
        title=f"Disable {d.code} for this line",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[lsp],
        edit=types.WorkspaceEdit(changes={uri: text_edits(codec, lines, [edit])}),
    )


def _inside_string(text: str, line: int) -> bool:
    """Whether line `line` ends inside a string token that goes on to the next line."""
    import io
    import tokenize

    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.STRING and token.start[0] <= line < token.end[0]:
                return True
            if token.start[0] > line:
                break
    except (tokenize.TokenError, SyntaxError):
        return True  # unreadable: adding nothing is the safe side
    return False


def hover_text(codes: Sequence[str]) -> str | None:
    """Markdown for the rules of the findings under the cursor: each one's summary and why (as `explain`)."""
    from mpdoctor.registry import get_rule

    parts = []
    for code in dict.fromkeys(codes):
        try:
            rule = get_rule(code)
        except KeyError:
            continue
        parts.append(
            f"**{rule.code} {rule.name}** ({rule.severity.value})\n\n{rule.summary}\n\n"
            f"**Why it breaks**\n\n{rule.why}\n\n**Fix**\n\n{rule.fix}\n\n"
            f"[Documentation]({rule_url(rule.code)}) · `mpdoctor explain {rule.code}`"
        )
    return "\n\n---\n\n".join(parts) or None


def path_of(uri: str) -> Path | None:
    """The file a `file:` URI names (None for an untitled buffer or another scheme)."""
    from pygls.uris import to_fs_path

    if not uri.startswith("file:"):
        return None
    found = to_fs_path(uri)
    return Path(found) if found else None
