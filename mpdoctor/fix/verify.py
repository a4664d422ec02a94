"""A fixed text checked before it is written: libcst reproduces it, and with the trace pass it is traced again from a
temporary file (never the user's) and must lose the fixed findings without gaining an error; a training fix's step
is compared with the float32 step (mpdoctor.fix.step)."""

from __future__ import annotations

import io
import os
import tempfile
import tokenize
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mpdoctor.diagnostics import Diagnostic, FileError, Severity
from mpdoctor.fix.results import UNVERIFIED, VERIFIED
from mpdoctor.fix.rounds import line_mapper
from mpdoctor.fix.step import StepComparison, changes_training, step_function

if TYPE_CHECKING:
    from mpdoctor.config import Config


def round_trip_problem(text: str) -> str | None:
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


def trace_as(
    path: Path | str,
    shown: str,
    fixed: str,
    config: Config,
    trace: Any,
    traces: list[Any],
    *,
    project: Any = None,
    prefix: str = "mpdoctor-fix-",
) -> tuple[list[Diagnostic], FileError | None]:
    """`check_source` of the fixed text, traced from a temporary copy outside the user's tree that runs as `path`
    (same `__file__`, same `sys.path`)."""
    from mpdoctor.engine import check_source

    with tempfile.TemporaryDirectory(prefix=prefix) as workdir:
        candidate = os.path.join(workdir, os.path.basename(path))
        with open(candidate, "wb") as handle:
            handle.write(fixed.encode(declared_encoding(fixed)))
        return check_source(
            fixed, shown, config, path=str(path), trace=trace, traces=traces, run_from=candidate, project=project
        )


def verify_by_trace(
    path, shown, original, fixed, before, applied, config, trace, project=None
) -> tuple[str | None, str, list[Diagnostic], list[Diagnostic], StepComparison | None]:
    """Trace the fixed text from a temporary file outside the user's tree, as if it were `path`: (problem,
    verification, diagnostics of the fixed text, the applied fixes to drop when they alone are the problem, the
    training step's comparison with float32 when the round holds a training fix)."""
    training = [d for d, _ in applied if changes_training(d)]
    function, why_not = (
        step_function(fixed, [(d, text) for d, text in applied if changes_training(d)]) if training else (None, None)
    )
    if function is not None:
        from mpdoctor.facts.trace_request import StepCheckRequest

        trace = replace(trace, step_check=StepCheckRequest(function))
    traces: list = []
    after, error = trace_as(path, shown, fixed, config, trace, traces, project=project)
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


def declared_encoding(text: str) -> str:
    """The encoding a coding cookie in `text` declares (utf-8 without one)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(text.encode("utf-8", errors="replace")).readline)
    return "utf-8" if encoding == "utf-8-sig" else encoding
