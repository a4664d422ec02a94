"""One file's fixes planned and verified, nothing written: rounds to a fixed point (mpdoctor.fix.rounds), then with the
trace pass the fixed text re-traced (mpdoctor.fix.verify); a verified result with new fixable trace findings gets
another round."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from mpdoctor.config import Config
from mpdoctor.diagnostics import Diagnostic
from mpdoctor.fix.results import RE_TRACED, REJECTED, STEP_VERIFIED, UNVERIFIED, VERIFIED, FileFix
from mpdoctor.fix.rounds import fix_key, line_mapper, plan_fixes, too_deep, wanted
from mpdoctor.fix.step import StepComparison, changes_training
from mpdoctor.fix.verify import round_trip_problem, verify_by_trace

MAX_TRACE_ROUNDS = 3  # verified rounds: each re-traces the file
TOO_DEEP = "too deeply nested"


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
    if too_deep(text):
        return _left_too_deep(shown, text, diagnostics, unsafe)
    try:
        return _fix_file(path, shown, text, diagnostics, config, trace, unsafe, project)
    except (RecursionError, MemoryError):  # a fix made the code deeper than the depth check saw
        return _left_too_deep(shown, text, diagnostics, unsafe)


def _left_too_deep(shown: str, text: str, diagnostics: list[Diagnostic], unsafe: bool) -> FileFix:
    """The file left as it is: code nested too deeply to fix."""
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
        # After a verified round, the findings are the fixed text's: all of them uncovered by the fixes.
        uncovered: set[int] = set()
        fixed, applied, refused, remaining = plan_fixes(current, before, recheck, unsafe, skip, uncovered)
        if before is not diagnostics:
            uncovered = {id(d) for d, _ in applied}
        result.not_applied += [r for r in refused if r not in result.not_applied]
        if fixed == current:
            break
        problem = round_trip_problem(fixed)
        verification, after, culprits, step = UNVERIFIED, remaining, [], None
        if problem is None and trace.enabled:
            problem, verification, after, culprits, step = verify_by_trace(
                path, shown, current, fixed, before, applied, config, trace, project
            )
        if problem and culprits and len(culprits) < len(applied) and not retried:
            # Cheap fallback (one more trace): the other fixes of the round without those that did not work.
            retried, rounds = True, rounds + 1
            skip |= {fix_key(d) for d in culprits}
            result.not_applied += [(d, problem) for d in culprits]
            continue
        if problem:
            result.not_applied += [(d, problem) for d, _ in applied]
            result.error = None if result.applied else problem  # earlier verified rounds still stand
            if not result.applied:
                result.verification = f"{REJECTED}: {problem}"
            break
        _accept(result, fixed, applied, after, verification, step)
        result.uncovered |= uncovered
        current, before = fixed, after
        if not trace.enabled or verification != VERIFIED:
            break
    result.verification = _training_verdict(result)
    return result


def withdraw_refused(result: FileFix, not_applied: list[tuple[Diagnostic, str]]) -> None:
    """The findings left whose fix was refused or rejected (`not_applied`: by the checks, not by a failed write)
    keep no fix: --fix does not apply it, so no count calls them fixable (why is in result.not_applied)."""
    if not not_applied or result.remaining is None:
        return
    refused = {id(d) for d, _ in not_applied}
    mapped = line_mapper(result.original, result.fixed)
    keys = {(d.code, d.fix.description, line) for d, _ in not_applied if d.fix for line in mapped(d.location.line)}
    result.remaining = [
        replace(d, fix=None)
        if d.fix is not None and (id(d) in refused or (d.code, d.fix.description, d.location.line) in keys)
        else d
        for d in result.remaining
    ]


def _accept(
    result: FileFix,
    fixed: str,
    applied: list[tuple[Diagnostic, str]],
    after: list[Diagnostic],
    verification: str,
    step: StepComparison | None,
) -> None:
    """A round that holds: its fixes join the result, its text is the one to write."""
    result.applied += [d for d, _ in applied]
    result.fixed, result.remaining, result.verification = fixed, after, verification
    if step is not None and step.agrees:
        result.step_verified |= {id(d) for d, _ in applied if changes_training(d)}
    elif step is not None:
        result.step_unchecked = step.unchecked


def _training_verdict(result: FileFix) -> str:
    """The verification of a verified result holding training fixes: the file builds and the finding is gone; the
    training update is checked only where a step was compared with float32."""
    training = [d for d in result.applied if changes_training(d)]
    if result.verification != VERIFIED or not training:
        return result.verification
    if all(id(d) in result.step_verified for d in training):
        return STEP_VERIFIED
    unchecked = result.step_unchecked
    return f"{RE_TRACED}: {unchecked}" if unchecked else RE_TRACED
