"""The fixes of one text applied to a fixed point, like ruff: the non-conflicting fixes of a round, a re-check, repeat.
Each round's result must parse and must read no name where the original did not have it on every path (the def-use
guard, mpdoctor.static.defuse); a fix whose finding comes back where it was applied is not applied again."""

from __future__ import annotations

import ast
import difflib
import re

from mpdoctor.diagnostics import Diagnostic
from mpdoctor.fix.apply import apply_fixes, edit_spans, overlaps
from mpdoctor.fix.simplify import simplify_artifacts
from mpdoctor.static.defuse import describe, introduced_undefined_reads

MAX_ROUNDS = 10
# Syntax-tree depth beyond which a file is not fixed: libcst (the round-trip check) needs a Python frame or two per
# level and parses such code in super-linear time (a 2,500-term sum: 10 s, then a RecursionError). Measured:
# depth 300 parses in 0.1 s; the checks themselves handle any depth Python's parser accepts.
MAX_FIX_DEPTH = 300


def wanted(d: Diagnostic, unsafe: bool) -> bool:
    return (
        d.fix is not None
        and bool(d.fix.edits)
        and (unsafe or d.fix.applicability == "safe")
        and all(e.path == d.location.path for e in d.fix.edits)
    )


def plan_fixes(
    text: str,
    diagnostics: list[Diagnostic],
    recheck,
    unsafe: bool,
    skip: set[tuple] = frozenset(),
    uncovered: set[int] | None = None,
) -> tuple[str, list[tuple[Diagnostic, str]], list[tuple[Diagnostic, str]], list[Diagnostic]]:
    """Apply fixes round by round until none is left: (fixed text, [(applied diagnostic, the text its lines refer
    to)], [(diagnostic, why not applied)], diagnostics of the fixed text per `recheck`). `recheck(text)` re-runs
    the (static) checks; fixes that clash with an earlier one wait for the next round; a fix whose finding comes
    back where it was applied is not applied again. `uncovered` receives the id of each applied diagnostic that is
    none of `diagnostics` (found again in a later round), but a finding the earlier fixes uncovered: what check did
    not count as fixable."""
    applied: list[tuple[Diagnostic, str]] = []
    refused: dict[tuple, tuple[Diagnostic, str]] = {}
    # The given findings whose fixes wait, with their lines in the current text: a later round's finding with the
    # same fix on those lines is one of them (its fix clashed with another), not one the fixes uncovered.
    waiting = [(d, range(d.location.line, d.location.line + 1)) for d in diagnostics if wanted(d, unsafe)]
    # Applied fixes as (code, fix description, lines in the current text, how many such findings were there): a
    # fix did not work when as many such findings are still reported there after it.
    done: list[tuple[str, str, range, int]] = []
    current = diagnostics

    def same(d: Diagnostic, code: str, what: str, lines: range) -> bool:
        return d.code == code and d.fix is not None and d.fix.description == what and d.location.line in lines

    for _ in range(MAX_ROUNDS):
        candidates = []
        for d in sorted(current, key=lambda d: (d.location.line, d.location.column, d.code)):
            if not wanted(d, unsafe) or fix_key(d) in refused or fix_key(d) in skip:
                continue
            if any(same(d, *entry[:3]) and sum(same(c, *entry[:3]) for c in current) >= entry[3] for entry in done):
                refused[fix_key(d)] = (d, "the finding is still reported after its fix")
                continue
            candidates.append(d)
        taken = _compatible(text, candidates, refused)
        if not taken:
            break
        new_text = same_line_endings(text, _apply(text, taken))
        if new_text == text:
            break
        if uncovered is not None:
            uncovered |= {id(d) for d in taken if not _was_waiting(d, waiting)}
        mapped = line_mapper(text, new_text)
        waiting = [(d, _mapped_range(mapped, lines)) for d, lines in waiting]
        done = [(code, what, _mapped_range(mapped, lines), count) for code, what, lines, count in done]
        done += [
            (
                d.code,
                d.fix.description,
                mapped(d.location.line),
                sum(same(c, d.code, d.fix.description, range(d.location.line, d.location.line + 1)) for c in current),
            )
            for d in taken
        ]
        applied += [(d, text) for d in taken]
        text = new_text
        current = recheck(text)
    else:
        for d in current:
            if wanted(d, unsafe):
                refused.setdefault(fix_key(d), (d, f"fixes did not converge after {MAX_ROUNDS} rounds"))
    return text, applied, list(refused.values()), current


def _was_waiting(d: Diagnostic, waiting: list[tuple[Diagnostic, range]]) -> bool:
    """Whether `d` is one of the given findings whose fix waits: itself, or found again (its code and fix) on the
    lines that one's became; that entry is taken off the list."""
    entry = next((w for w in waiting if w[0] is d), None) or next(
        (w for w in waiting if _same_fix(w[0], d) and d.location.line in w[1]), None
    )
    if entry is None:
        return False
    waiting.remove(entry)
    return True


def _same_fix(a: Diagnostic, b: Diagnostic) -> bool:
    return a.code == b.code and a.fix is not None and b.fix is not None and a.fix.description == b.fix.description


def _mapped_range(mapped, lines: range) -> range:
    """Lines of the old text as lines of the new (line_mapper's `mapped`)."""
    return range(mapped(lines.start).start, mapped(lines.stop - 1).stop)


def same_line_endings(original: str, fixed: str) -> str:
    """`fixed` with the line endings of `original` when it uses CRLF throughout: the lines a fix inserts (written
    with LF) get CRLF too. A file that mixes both is left as the fix made it."""
    crlf = original.count("\r\n")
    if not crlf or crlf != original.count("\n"):
        return fixed
    return re.sub(r"(?<!\r)\n", "\r\n", fixed)


def nesting_depth(tree: ast.AST) -> int:
    """The depth of a syntax tree (iterative: the tree may be deeper than the recursion limit)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def too_deep(text: str) -> bool:
    try:
        return nesting_depth(ast.parse(text)) > MAX_FIX_DEPTH
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True


def _compatible(text: str, candidates: list[Diagnostic], refused: dict) -> list[Diagnostic]:
    """The candidates whose edits clash with no earlier one and whose result passes the final checks (it parses, and
    it reads no name where the original did not have it on every path); when the round's result fails them, the
    candidates are tried one by one (rare, so the common case costs a single parse)."""
    taken: list[tuple[Diagnostic, list]] = []
    for d in candidates:
        spans = edit_spans(text, d.fix.edits)
        if not any(overlaps(spans, other) for _, other in taken):
            taken.append((d, spans))
    before = parsed(text)
    if _problem(text, before, [d for d, _ in taken]) is None:
        return [d for d, _ in taken]
    kept: list[Diagnostic] = []
    for d, _ in taken:
        problem = _problem(text, before, [*kept, d])
        if problem is None:
            kept.append(d)
        else:
            refused[fix_key(d)] = (d, problem)
    return kept


def _apply(text: str, diagnostics: list[Diagnostic]) -> str:
    """The text with the fixes' edits, then without the artifacts they leave (`x = x`, `a if c else a`)."""
    return simplify_artifacts(text, apply_fixes(text, diagnostics))


def _problem(text: str, before: ast.Module | None, diagnostics: list[Diagnostic]) -> str | None:
    """Why the fixes must not be applied to `text`: the result does not parse, or (the def-use guard) it reads a
    name on a path where nothing assigned it although the original did not (a fix that rewrites the float32 branch
    to differentiate `scaled_loss`, which only the float16 branch assigns). Checked on the edits as made and after
    their clean-up: merging two arms that became identical leaves one read where there were two, which would hide
    the new one from a count."""
    edited = apply_fixes(text, diagnostics)
    for fixed in dict.fromkeys((edited, simplify_artifacts(text, edited))):
        after = parsed(fixed)
        if after is None:
            return "the fixed source would not parse"
        if before is not None:
            try:
                reads = introduced_undefined_reads(before, after)
            except RecursionError:
                return "the fixed source is too deeply nested to check its data flow"
            if reads:
                return f"the fix would read {describe(reads)}, where it is not assigned on every path reaching it"
    return None


def fix_key(d: Diagnostic) -> tuple:
    return (d.code, d.location.line, d.location.column, d.fix.description if d.fix else "")


def parsed(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def line_mapper(old: str, new: str):
    """old line -> the range of new lines it became (exact for unchanged lines, the replaced block otherwise)."""
    blocks = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False).get_opcodes()

    def mapped(line: int) -> range:
        for tag, i1, i2, j1, j2 in blocks:
            if i1 < line <= i2:
                if tag == "equal":
                    return range(j1 + line - i1, j1 + line - i1 + 1)
                return range(j1 + 1, max(j2, j1 + 1) + 1)
        return range(line, line + 1)

    return mapped
