"""`check --fix` / `--diff`: apply the fix edits diagnostics carry, to a fixed point (like ruff: non-conflicting
fixes per round, re-check, repeat), verify the result (it parses; with the trace pass, the fixed text is traced again
without being written and must lose the fixed diagnostics without gaining an error), then write it atomically.

Never touches a file that changed since it was analysed, and never writes a result that does not parse.
"""

from __future__ import annotations

import ast
import difflib
import io
import os
import re
import tempfile
import tokenize
from dataclasses import dataclass, field, replace
from pathlib import Path

from mpdoctor import writes
from mpdoctor.config import Config
from mpdoctor.diagnostics import Diagnostic, Severity
from mpdoctor.fixes import apply_edits, edit_spans, overlaps, unified_diff
from mpdoctor.printable import escape_controls
from mpdoctor.reads import read_bytes
from mpdoctor.static.defuse import describe, introduced_undefined_reads
from mpdoctor.static.simplify import simplify_artifacts

MAX_ROUNDS = 10
MAX_TRACE_ROUNDS = 3  # verified rounds: each re-traces the file
# Syntax-tree depth beyond which a file is not fixed: libcst (the round-trip check) needs a Python frame or two per
# level and parses such code in super-linear time (a 2,500-term sum: 10 s, then a RecursionError). Measured:
# depth 300 parses in 0.1 s; the checks themselves handle any depth Python's parser accepts.
MAX_FIX_DEPTH = 300
TOO_DEEP = "too deeply nested"
VERIFIED = "verified"
UNVERIFIED = "unverified (no trace pass)"
RE_TRACED = "the trace re-ran; the training step was not compared with float32"
STEP_VERIFIED = "verified by a training step"
# The behavioural check of a training fix (issue 19): the fixed step's weight update against the float32 step's.
MIN_COSINE = 0.99
NORM_RATIO = (0.5, 2.0)


@dataclass
class FileFix:
    """What --fix did (or --diff would do) to one file."""

    shown: str
    original: str
    fixed: str
    applied: list[Diagnostic] = field(default_factory=list)
    not_applied: list[tuple[Diagnostic, str]] = field(default_factory=list)
    remaining: list[Diagnostic] | None = None  # diagnostics of the text that is on disk afterwards (if known)
    verification: str = UNVERIFIED
    # The training fixes whose step was compared with float32 and agreed ({id(diagnostic)}), and why the others of
    # the last round were not compared.
    step_verified: set = field(default_factory=set)
    step_unchecked: str | None = None
    written: bool = False
    error: str | None = None  # why nothing was written

    @property
    def changed(self) -> bool:
        return self.fixed != self.original and self.error is None

    def diff(self) -> str:
        if not self.changed:
            return ""
        return unified_diff(self.original, self.fixed, self.shown)

    def to_dict(self) -> dict:
        def one(d: Diagnostic) -> dict:
            return {
                "code": d.code,
                "line": d.location.line,
                "description": d.fix.description if d.fix else "",
                "applicability": d.fix.applicability if d.fix else None,
            }

        return {
            "path": self.shown,
            "written": self.written,
            "verification": self.verification,
            "error": self.error,
            "applied": [one(d) for d in self.applied],
            "not_applied": [{**one(d), "reason": reason} for d, reason in self.not_applied],
        }


NOT_IN_NOTEBOOKS = "fixes are shown but not applied to notebooks: apply the diff to the cell"


@dataclass
class NotebookFix(FileFix):
    """What --fix/--diff show for a notebook: the cell fixes as diffs of the cells, never written (the edits are
    lines of cells; the .ipynb file is JSON)."""

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


def wanted(d: Diagnostic, unsafe: bool) -> bool:
    return (
        d.fix is not None
        and bool(d.fix.edits)
        and (unsafe or d.fix.applicability == "safe")
        and all(e.path == d.location.path for e in d.fix.edits)
    )


def plan_fixes(
    text: str, diagnostics: list[Diagnostic], recheck, unsafe: bool, skip: set[tuple] = frozenset()
) -> tuple[str, list[tuple[Diagnostic, str]], list[tuple[Diagnostic, str]], list[Diagnostic]]:
    """Apply fixes round by round until none is left: (fixed text, [(applied diagnostic, the text its lines refer
    to)], [(diagnostic, why not applied)], diagnostics of the fixed text per `recheck`). `recheck(text)` re-runs
    the (static) checks; fixes that clash with an earlier one wait for the next round; a fix whose finding comes
    back where it was applied is not applied again."""
    applied: list[tuple[Diagnostic, str]] = []
    refused: dict[tuple, tuple[Diagnostic, str]] = {}
    # Applied fixes as (code, fix description, lines in the current text, how many such findings were there): a
    # fix did not work when as many such findings are still reported there after it.
    done: list[tuple[str, str, range, int]] = []
    current = diagnostics

    def same(d: Diagnostic, code: str, what: str, lines: range) -> bool:
        return d.code == code and d.fix is not None and d.fix.description == what and d.location.line in lines

    for _ in range(MAX_ROUNDS):
        candidates = []
        for d in sorted(current, key=lambda d: (d.location.line, d.location.column, d.code)):
            if not wanted(d, unsafe) or _key(d) in refused or _key(d) in skip:
                continue
            if any(same(d, *entry[:3]) and sum(same(c, *entry[:3]) for c in current) >= entry[3] for entry in done):
                refused[_key(d)] = (d, "the finding is still reported after its fix")
                continue
            candidates.append(d)
        taken = _compatible(text, candidates, refused)
        if not taken:
            break
        new_text = same_line_endings(text, _apply(text, taken))
        if new_text == text:
            break
        mapped = line_mapper(text, new_text)
        done = [
            (code, what, range(mapped(lines.start).start, mapped(lines.stop - 1).stop), count)
            for code, what, lines, count in done
        ]
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
                refused.setdefault(_key(d), (d, f"fixes did not converge after {MAX_ROUNDS} rounds"))
    return text, applied, list(refused.values()), current


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


def _too_deep(text: str) -> bool:
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
    before = _tree(text)
    if _problem(text, before, [d for d, _ in taken]) is None:
        return [d for d, _ in taken]
    kept: list[Diagnostic] = []
    for d, _ in taken:
        problem = _problem(text, before, [*kept, d])
        if problem is None:
            kept.append(d)
        else:
            refused[_key(d)] = (d, problem)
    return kept


def _apply(text: str, diagnostics: list[Diagnostic]) -> str:
    """The text with the fixes' edits, then without the artifacts they leave (`x = x`, `a if c else a`)."""
    return simplify_artifacts(text, _edited(text, diagnostics))


def _edited(text: str, diagnostics: list[Diagnostic]) -> str:
    return apply_edits(text, [e for d in diagnostics for e in d.fix.edits])


def _problem(text: str, before: ast.Module | None, diagnostics: list[Diagnostic]) -> str | None:
    """Why the fixes must not be applied to `text`: the result does not parse, or (the def-use guard) it reads a
    name on a path where nothing assigned it although the original did not (a fix that rewrites the float32 branch
    to differentiate `scaled_loss`, which only the float16 branch assigns). Checked on the edits as made and after
    their clean-up: merging two arms that became identical leaves one read where there were two, which would hide
    the new one from a count."""
    edited = _edited(text, diagnostics)
    for fixed in dict.fromkeys((edited, simplify_artifacts(text, edited))):
        after = _tree(fixed)
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


def _key(d: Diagnostic) -> tuple:
    return (d.code, d.location.line, d.location.column, d.fix.description if d.fix else "")


def _tree(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _must_round_trip(text: str) -> str | None:
    """libcst's full-fidelity parse (a stricter check than ast: the result must be a module it can reproduce)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # libcst's own imports, not the user's business
        import libcst

    try:
        if libcst.parse_module(text).code != text:
            return "the fixed source does not round-trip through libcst"
    except libcst.ParserSyntaxError as exc:
        return f"the fixed source does not parse: {str(exc).splitlines()[0]}"
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


def ineffective(
    fixed: str, applied: list[tuple[Diagnostic, str]], after: list[Diagnostic]
) -> list[tuple[Diagnostic, int]]:
    """(applied diagnostic, line in `fixed`) of the fixes whose finding the fixed text still has."""
    found = []
    for d, text in applied:
        lines = line_mapper(text, fixed)(d.location.line)
        still = [a for a in after if a.code == d.code and a.location.line in lines]
        if still:
            found.append((d, still[0].location.line))
    return found


def verification_problems(
    original: str, fixed: str, before: list[Diagnostic], applied: list[tuple[Diagnostic, str]], after: list[Diagnostic]
) -> list[str]:
    """Why a traced fixed file is not better: a fixed diagnostic is still reported, or an error appeared that the
    original did not have."""
    problems = [
        f"{d.code} is still reported after the fix (line {line})" for d, line in ineffective(fixed, applied, after)
    ]
    to_fixed = line_mapper(original, fixed)
    known = {(b.code, line) for b in before for line in to_fixed(b.location.line)}
    for a in after:
        if (a.severity is Severity.ERROR or a.code == "MP001") and (a.code, a.location.line) not in known:
            problems.append(f"new {a.code} at line {a.location.line}: {a.message}")
    return list(dict.fromkeys(problems))


def fix_file(
    path: Path,
    shown: str,
    text: str,
    diagnostics: list[Diagnostic],
    config: Config,
    trace,
    unsafe: bool,
    project=None,
) -> FileFix:
    """Plan and verify the fixes of one file (nothing is written here). With the trace pass, a verified result can
    show new trace-only findings with fixes (a float16 output once the policy is mixed): they get another verified
    round, so that a second --fix has nothing left to do. `project`: the policy contexts the file was checked with
    (its project's entry points), kept for every re-check."""
    if _too_deep(text):
        result = FileFix(shown, text, text, remaining=diagnostics)
        result.not_applied = [(d, TOO_DEEP) for d in diagnostics if wanted(d, unsafe)]
        return result
    try:
        return _fix_file(path, shown, text, diagnostics, config, trace, unsafe, project)
    except (RecursionError, MemoryError):  # a fix made the code deeper than the depth check saw
        result = FileFix(shown, text, text, remaining=diagnostics)
        result.not_applied = [(d, TOO_DEEP) for d in diagnostics if wanted(d, unsafe)]
        return result


def _fix_file(
    path: Path, shown: str, text: str, diagnostics: list[Diagnostic], config: Config, trace, unsafe: bool, project
) -> FileFix:
    from mpdoctor.engine import TraceOptions, check_source

    static_only = TraceOptions(enabled=False)

    def recheck(candidate: str) -> list[Diagnostic]:
        found, _error = check_source(candidate, shown, config, path=str(path), trace=static_only, project=project)
        # A static re-check cannot see what suppressions the trace pass used: never "fix" those away.
        return [d for d in found if not (trace.enabled and d.code == "MP002")]

    result = FileFix(shown, text, text, remaining=diagnostics)
    current, before = text, diagnostics
    skip: set[tuple] = set()
    retried = False
    rounds = MAX_TRACE_ROUNDS if trace.enabled else 1
    while rounds:
        rounds -= 1
        fixed, applied, refused, remaining = plan_fixes(current, before, recheck, unsafe, skip)
        result.not_applied += [r for r in refused if r not in result.not_applied]
        if fixed == current:
            break
        problem = _must_round_trip(fixed)
        verification, after, culprits = UNVERIFIED, remaining, []
        step = None
        if problem is None and trace.enabled:
            problem, verification, after, culprits, step = _verify_by_trace(
                path, shown, current, fixed, before, applied, config, trace, project
            )
        if problem and culprits and len(culprits) < len(applied) and not retried:
            # Cheap fallback (one more trace): the other fixes of the round without those that did not work.
            retried, rounds = True, rounds + 1
            skip |= {_key(d) for d in culprits}
            result.not_applied += [(d, problem) for d in culprits]
            continue
        if problem:
            result.not_applied += [(d, problem) for d, _ in applied]
            result.error = None if result.applied else problem  # earlier verified rounds still stand
            break
        result.applied += [d for d, _ in applied]
        result.fixed, result.remaining, result.verification = fixed, after, verification
        if step is not None and step.agrees:
            result.step_verified |= {id(d) for d, _ in applied if _trains(d)}
        elif step is not None:
            result.step_unchecked = step.unchecked
        current, before = fixed, after
        if not trace.enabled or verification != VERIFIED:
            break
    training = [d for d in result.applied if _trains(d)]
    if result.verification == VERIFIED and training:
        # The file builds and the finding is gone; the training update is checked only where a step was compared.
        if all(id(d) in result.step_verified for d in training):
            result.verification = STEP_VERIFIED
        else:
            unchecked = result.step_unchecked
            result.verification = f"{RE_TRACED}: {unchecked}" if unchecked else RE_TRACED
    return result


def _trains(d: Diagnostic) -> bool:
    return bool(d.fix and d.fix.changes_training)


def _verify_by_trace(
    path, shown, original, fixed, before, applied, config, trace, project=None
) -> tuple[str | None, str, list[Diagnostic], list[Diagnostic], StepComparison | None]:
    """Trace the fixed text from a temporary file outside the user's tree, as if it were `path`: (problem,
    verification, diagnostics of the fixed text, the applied fixes to drop when they alone are the problem, the
    training step's comparison with float32 when the round holds a training fix)."""
    from mpdoctor.engine import check_source

    training = [d for d, _ in applied if _trains(d)]
    function, why_not = (
        step_function(fixed, [(d, text) for d, text in applied if _trains(d)]) if training else (None, None)
    )
    if function is not None:
        from mpdoctor.facts.trace_request import StepCheckRequest

        trace = replace(trace, step_check=StepCheckRequest(function))
    traces: list = []
    with tempfile.TemporaryDirectory(prefix="mpdoctor-fix-") as workdir:
        candidate = os.path.join(workdir, os.path.basename(path))
        with open(candidate, "wb") as handle:
            handle.write(fixed.encode(_declared_encoding(fixed)))
        after, error = check_source(
            fixed, shown, config, path=str(path), trace=trace, traces=traces, run_from=candidate, project=project
        )
    if error is not None:
        return f"the fixed file cannot be checked: {error.message}", UNVERIFIED, before, [], None
    problems = verification_problems(original, fixed, before, applied, after)
    if problems:
        culprits = [d for d, _ in ineffective(fixed, applied, after)]
        only_ineffective = len(problems) == len(culprits)  # no new error: dropping those fixes may be enough
        return (
            "re-tracing the fixed file: " + "; ".join(problems[:3]),
            UNVERIFIED,
            before,
            culprits if only_ineffective else [],
            None,
        )
    crashed = [a for a in after if a.code == "MP001"]
    # The run dies before and after the fix for a reason of its own: the fix is no worse, but nothing is proven.
    if crashed:
        from mpdoctor.tf_messages import shorten

        reason = shorten(crashed[0].message, 120)
        return None, f"unverified (the trace fails before and after the fix: {reason})", after, [], None
    if not training:
        return None, VERIFIED, after, [], None
    record = getattr(traces[0], "step_check", None) if traces else None
    step = StepComparison.of(function, record, why_not)
    if step.problem:  # the fixed step does not train like float32: the round's training fixes are the culprits
        return step.problem, UNVERIFIED, before, training, step
    return None, VERIFIED, after, [], step


@dataclass
class StepComparison:
    """What one training step of a fixed file did against the float32 step (trace/child/step_check.py)."""

    agrees: bool = False
    problem: str | None = None  # the fix must not be applied
    unchecked: str | None = None  # why nothing is claimed either way

    @classmethod
    def of(cls, function: str | None, record, why_not: str | None) -> StepComparison:
        if function is None:
            return cls(unchecked=why_not)
        if record is None:
            return cls(unchecked=f"the training step `{function}` was not run")
        if record.skipped:
            return cls(unchecked=f"`{function}`: {record.skipped}")
        ratio, cosine = record.norm_ratio or 0.0, record.cosine or 0.0
        if ratio == 0.0:
            return cls(problem="the fixed step does not move the weights; the float32 step does")
        if not NORM_RATIO[0] <= ratio <= NORM_RATIO[1]:
            return cls(problem=f"the fixed step updates weights {_times(ratio)}x the float32 step")
        if cosine <= MIN_COSINE:
            return cls(
                problem=f"the fixed step moves the weights another way than the float32 step (cosine {cosine:.2f})"
            )
        return cls(agrees=True)


def _times(ratio: float) -> str:
    """3.1e-05 -> 3.1e-5 (small and large ratios in scientific notation); 0.31 -> 0.31."""
    text = f"{ratio:.1e}" if ratio < 0.01 or ratio >= 100 else f"{ratio:.2g}"
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + ("-" if m.group(1) == "-" else "") + m.group(2), text)


def step_function(fixed: str, training: list[tuple[Diagnostic, str]]) -> tuple[str | None, str | None]:
    """(the module-level function holding every training fix, in `fixed`; or None and why there is none). That is
    the step the trace child can call by name once the module is imported."""
    tree = _tree(fixed)
    if tree is None:
        return None, "the fixed file does not parse"
    functions = [
        (node.name, range(min([node.lineno, *(d.lineno for d in node.decorator_list)]), node.end_lineno + 1))
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    names = set()
    for d, text in training:
        mapped = line_mapper(text, fixed)
        # Where the finding is, else where its edits are (a fix reported at the optimizer may edit the step).
        lines = [mapped(line).start for line in (d.location.line, *(e.line for e in d.fix.edits))]
        owner = next((name for line in lines for name, span in functions if line in span), None)
        if owner is None:
            return None, "the fixed training code is not in a module-level function"
        names.add(owner)
    if len(names) != 1:
        return None, "the training fixes are in more than one function"
    name = names.pop()
    node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)
    # Called as step(inputs, labels): a function of other parameters (a `main()`, a whole training loop) is not run.
    required = len(node.args.posonlyargs) + len(node.args.args) - len(node.args.defaults)
    if isinstance(node, ast.AsyncFunctionDef) or required != 2 or any(d is None for d in node.args.kw_defaults):
        return None, f"`{name}` does not take (inputs, labels) as a training step does"
    return name, None


def _declared_encoding(text: str) -> str:
    """The encoding a coding cookie in `text` declares (utf-8 without one)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(text.encode("utf-8", errors="replace")).readline)
    return "utf-8" if encoding == "utf-8-sig" else encoding


# ------------------------------------------------------------------------------------------------ writing


class StaleFile(Exception):
    """The file changed on disk since it was analysed."""


class ReadOnly(Exception):
    """The user cannot write the file (its permissions say so): --fix leaves it alone."""


def _decode(data: bytes) -> tuple[str, str]:
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding), encoding


def write_atomic(path: Path, analysed: str, new_text: str) -> None:
    """Replace the file's text by `new_text` if it still holds `analysed`, through mpdoctor.writes (temporary file,
    fsync, rename; mode, owner, group, extended attributes and hard links kept). On any failure the original is
    intact. A file the user may not write is refused (ReadOnly), even when the folder would allow the rename."""
    target = Path(os.path.realpath(path))  # a symlink keeps pointing at the fixed file
    data = read_bytes(target)
    current, encoding = _decode(data)
    if current != analysed:
        raise StaleFile(f"{path} changed since it was analysed; not touched (run mpdoctor again)")
    if not os.access(target, os.W_OK):
        raise ReadOnly("read-only: not fixed")
    try:
        writes.write_atomic(target, new_text.encode(encoding), expect=data)
    except writes.FileChanged:  # a last look right before the rename
        raise StaleFile(f"{path} changed since it was analysed; not touched (run mpdoctor again)") from None


# ------------------------------------------------------------------------------------------------ report level


def fix_report(report, config: Config, trace, *, unsafe: bool, write: bool) -> None:
    """Plan (and with `write`, apply) the fixes of every file in the report; the report then lists what remains
    (and, for a file written, keeps its new text)."""
    by_file: dict[str, list[Diagnostic]] = {}
    for d in report.diagnostics:
        by_file.setdefault(d.location.path, []).append(d)
    results = []
    remaining: list[Diagnostic] = []
    for shown, diagnostics in by_file.items():
        source = report.sources.get(shown)
        if source is not None and source.cells is not None:  # a notebook: its fixes are shown, never applied
            shown_fix = notebook_fix(shown, source, diagnostics, unsafe)
            if shown_fix is not None:
                results.append(shown_fix)
            remaining += diagnostics
            continue
        if source is None or not any(wanted(d, unsafe) for d in diagnostics):
            remaining += diagnostics
            continue
        path, text = source.path, source.text
        result = fix_file(path, shown, text, diagnostics, config, trace, unsafe, report.contexts.get(shown))
        if write and result.changed:
            try:
                write_atomic(path, text, result.fixed)
                result.written = True
                report.sources[shown] = replace(source, text=result.fixed)
            except (StaleFile, ReadOnly) as exc:
                result.error = str(exc)
            except OSError as exc:
                result.error = f"{shown}: cannot write: {exc.strerror or exc}; the original is unchanged"
        if not result.written:
            if result.error and result.applied:
                result.not_applied += [(d, result.error) for d in result.applied]
                result.applied = []
            if write or result.remaining is None:
                result.remaining = diagnostics
        remaining += result.remaining if result.remaining is not None else diagnostics
        results.append(result)
    report.diagnostics = sorted(remaining, key=Diagnostic.sort_key)
    report.fixes = results


def write_diffs(report, stream, errors, *, unsafe: bool) -> int:
    """--diff: the unified diff of every file a --fix would change on `stream`, what would not be applied and a
    summary on `errors`; returns how many fixes the diffs hold."""
    count = in_cells = 0
    for result in report.fixes or ():
        diff = result.diff()
        if diff:
            stream.write(diff if diff.endswith("\n") else diff + "\n")
            if isinstance(result, NotebookFix):
                in_cells += len(result.in_diff)
                errors.write(f"{result.shown}: {NOT_IN_NOTEBOOKS}\n")
            else:
                count += len(result.applied)
        for d, reason in result.not_applied:
            errors.write(escape_controls(f"{fix_location(d.location)}: {d.code} fix not applied: {reason}") + "\n")
    hidden = 0 if unsafe else sum(1 for d in report.diagnostics if _unsafe(d))
    parts = [f"Would fix {_problems(count)}."] if count else []
    if in_cells:
        parts.append(f"{_problems(in_cells, 'fix')} for notebook cells shown, not applied.")
    summary = " ".join(parts) or "No fixes available."
    if hidden:
        summary += f" {hidden} more with --unsafe-fixes."
    errors.write(summary + "\n")
    return count + in_cells


def fix_location(location) -> str:
    """Where a fix that was not applied belongs: `model.py:12`, `demo.ipynb:cell 3:line 5`."""
    if location.cell is not None:
        return f"{location.path}:cell {location.cell}:line {location.line}"
    return f"{location.path}:{location.line}"


def _unsafe(d: Diagnostic) -> bool:
    fix = d.fix or d.cell_fix
    return fix is not None and fix.applicability == "unsafe"


def _problems(count: int, word: str = "problem") -> str:
    return f"{count} {word}{'' if count == 1 else ('es' if word.endswith('x') else 's')}"
