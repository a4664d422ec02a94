"""MP001 trace-failed and MP002 unused-suppression: the run itself. The engine raises both: MP001 when the trace
child fails or the run's exception is explained by no other rule, MP002 after suppressions were applied."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic, Edit, Fix, Location, Severity
from mpdoctor.registry import define_rule, get_rule, raised_by_engine
from mpdoctor.static.context import source_lines
from mpdoctor.suppress import ALL
from mpdoctor.tf_messages import first_message_line, shorten
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import ExceptionRecord, Facts

TRACE_FAILED, UNUSED_SUPPRESSION = "MP001", "MP002"

define_rule(
    "MP001",
    "trace-failed",
    "error",
    "T",
    False,
    summary="Importing the file or building/calling the model raised, and no other rule explains it.",
    what="""
        The trace pass imports the model file in a child process and builds and calls every model it finds. When
        that raises (or the child crashes or times out) and no more specific rule explains the exception, MP001
        reports the exception type, its message and the frame in your file that raised it.
        """,
    why="""
        A model that cannot be built cannot be checked: every trace-based rule was skipped for it. Static findings
        for the file are still reported. When mpdoctor itself cannot trace in this environment (its hooks do not
        fit the installed TensorFlow/Keras, or one of them failed), MP001 says so at info severity: "mpdoctor
        cannot trace on TensorFlow X / Keras Y: <reason>" (`--verbose` prints mpdoctor's traceback); that is
        never an exception of your code, and the static findings are reported as usual.
        """,
    bad="""
        import keras

        inputs = keras.Input((4,))
        x = keras.layers.Reshape((3, 2))(inputs)   # raises: 4 values cannot become 3 x 2
        outputs = keras.layers.Dense(10)(keras.layers.Flatten()(x))
        model = keras.Model(inputs, outputs)
        """,
    good="""
        import keras

        inputs = keras.Input((4,))
        x = keras.layers.Reshape((2, 2))(inputs)
        outputs = keras.layers.Dense(10)(keras.layers.Flatten()(x))
        model = keras.Model(inputs, outputs)
        """,
    fix="No autofix: the message names the exception and the line to look at.",
)

define_rule(
    "MP002",
    "unused-suppression",
    "info",
    "S",
    True,
    summary="A `# noqa: MPxxx` / `# mpdoctor: ignore[MPxxx]` comment that suppressed nothing.",
    what="""
        A suppression comment names a code that was not reported on that line (or, for `ignore-file`, anywhere in
        the file). Codes of rules that did not run (disabled, or trace-only rules under `--no-trace`) are not
        reported, since another run may need them. A bare `# noqa` or `# noqa: E501` belongs to other linters
        and is left alone.
        """,
    why="""
        Stale suppressions hide future findings on that line: when the code changes and the problem comes back,
        nobody is told.
        """,
    bad="""
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.Input((784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10, activation="softmax", dtype="float32"),  # noqa: MP401
        ])
        """,
    good="""
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.Input((784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10, activation="softmax", dtype="float32"),
        ])
        """,
    fix="Removes the comment when it holds only unused MP codes and nothing else (safe).",
)


# ------------------------------------------------------------------------------------------------- MP001


def trace_failed(ctx: TraceContext, reason: str, output_tail: str) -> Diagnostic:
    """The child produced no (complete) facts: it crashed, hung, ran out of memory or was killed."""
    last = [line for line in output_tail.strip().splitlines() if line.strip()]
    hint = f"; last output: {shorten(last[-1], 200)}" if last else ""
    return ctx.diagnostic(
        "MP001",
        None,
        f"trace pass failed: {reason}{hint}; static findings are still reported",
        confidence=Confidence.HIGH,
    )


_STOPPED_WHILE = {
    "prepare": "while TensorFlow was imported",
    "import": "while the file ran",
    "build": "while its builders ran",
    "analysis": "while its models were analysed",
}


def trace_timed_out(ctx: TraceContext, facts: Facts, timeout: float | None) -> Diagnostic:
    """The child stopped at the timeout and wrote what it had gathered (issue 14 item 7): the other trace findings
    come from that; this one says where the time ran out, at that line of the user's file."""
    record = facts.timeout
    where = record.location if record.location is not None and record.location.line else None
    if where is not None:
        place = f"at line {where.line} of {os.path.basename(ctx.shown(where.file))}"
    else:
        place = _STOPPED_WHILE.get(record.phase, "while the file ran")
    limit = f" (timeout {timeout:g} s)" if timeout is not None else ""
    return ctx.diagnostic(
        "MP001",
        where,
        f"the trace ran out of time {place}{limit}; findings above are from what ran before (raise "
        '--trace-timeout, or put training under `if __name__ == "__main__":`)',
        confidence=Confidence.HIGH,
    )


_PHASES = {
    "import": "importing the file",
    "build": "building the model",
    "call": "calling the model on a sample batch",
    "internal": "tracing the file",
}


def unexplained_exception(ctx: TraceContext, exception: ExceptionRecord) -> Diagnostic:
    """The run raised and no rule explains the exception."""
    phase = _PHASES.get(exception.phase, "tracing the file")
    message = f"{phase} raised {exception.type or 'an exception'}: {first_message_line(exception.message)}"
    if exception.location is None:
        message += " (no frame of this file in the traceback)"
    return ctx.diagnostic("MP001", exception.location, message)


def cannot_trace(ctx: TraceContext, facts: Facts) -> Diagnostic:
    """mpdoctor's own failure in the trace child: an info finding (the user's code is not at fault), with what
    failed and mpdoctor's traceback as notes (shown by --verbose)."""
    from mpdoctor.facts.schema import cannot_trace_message

    failure = facts.tool_failure
    notes = [
        f"failed while {_STAGES.get(failure.stage, failure.stage)}" + (f" ({failure.where})" if failure.where else "")
    ]
    if failure.adapters:
        notes.append("Keras adapters: " + ", ".join(f"{k} -> {v}" for k, v in sorted(failure.adapters.items())))
    if failure.traceback:
        notes.append("mpdoctor's traceback:\n" + failure.traceback.rstrip())
    diagnostic = ctx.diagnostic(
        "MP001",
        None,
        f"{cannot_trace_message(facts.environment, failure)}; the trace-based rules were skipped (this is not an "
        "error of your code), static findings are still reported",
        confidence=Confidence.HIGH,
        notes=tuple(notes),
    )
    return replace(diagnostic, severity=Severity.INFO)


_STAGES = {
    "hooks": "installing its hooks (the file did not run)",
    "hook": "recording the run in one of its hooks",
    "child": "analysing the run",
}


def internal_error(ctx: TraceContext, check_name: str, exc: Exception) -> Diagnostic:
    """A trace rule failed on the facts: reported, the other rules' findings kept."""
    return ctx.diagnostic(
        "MP001",
        None,
        f"internal error in {check_name} while reading the trace facts: "
        f"{type(exc).__name__}: {exc} (please report this)",
        confidence=Confidence.LOW,
    )


# ------------------------------------------------------------------------------------------------- MP002


def unused_suppressions(suppressions, shown: str, text: str, could_have_run: Callable[[str], bool]) -> list[Diagnostic]:
    """A suppression comment naming codes that were not reported on its line (and could have been)."""
    if not suppressions:
        return []
    found = []
    lines = source_lines(text)
    for s in suppressions:
        if ALL in s.codes:
            unused = () if s.used else ("all codes",)
        else:
            # A code whose rule cannot run in these passes (or is disabled) may be needed by another run: keep quiet.
            unused = tuple(c for c in s.codes if c not in s.used and could_have_run(c))
        if not unused:
            continue
        fix = None
        if ALL not in s.codes and len(unused) == len(s.codes) and s.only_ours:
            fix = _remove_comment_fix(shown, lines, s)
        found.append(
            Diagnostic(
                code="MP002",
                message=f"unused suppression ({', '.join(unused)}): nothing here was reported",
                location=Location(shown, s.line, s.column, s.line, s.end_column),
                severity=get_rule("MP002").severity,
                passes=("static",),
                fix=fix,
            )
        )
    return found


def _remove_comment_fix(shown: str, lines: list[str], s) -> Fix:
    line_text = lines[s.line - 1]
    start = s.column - 1
    while start > 0 and line_text[start - 1] in " \t":
        start -= 1
    if line_text[:start].strip() == "":
        edit = Edit(shown, s.line, 1, s.line + 1, 1, "")  # the comment is the whole line
    else:
        edit = Edit(shown, s.line, start + 1, s.line, len(line_text) + 1, "")
    return Fix("remove the unused suppression comment", (edit,))


raised_by_engine(TRACE_FAILED, UNUSED_SUPPRESSION)
