"""The trace pass's own findings (MP001, whose rule module registers it as the code the engine raises): the child
failed, crashed, timed out or could not trace, a trace rule raised, or the run's exception is explained by no rule.
The messages are the engine's; the code is asked of the registry (`engine_code`), never named here."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic, Severity
from mpdoctor.registry import engine_code
from mpdoctor.tf_messages import cause, exception_summary, shorten
from mpdoctor.trace.broken_dependencies import site_module, traceback_frames

if TYPE_CHECKING:
    from mpdoctor.facts.records import SourceRef
    from mpdoctor.facts.schema import ExceptionRecord, Facts
    from mpdoctor.trace_context import TraceContext


def _run_failed(ctx: TraceContext, where: SourceRef | None, message: str, **details) -> Diagnostic:
    return ctx.diagnostic(engine_code("run_failed"), where, message, **details)


def trace_failed(ctx: TraceContext, reason: str, output_tail: str) -> Diagnostic:
    """The child produced no (complete) facts: it crashed, hung, ran out of memory or was killed."""
    last = [line for line in output_tail.strip().splitlines() if line.strip()]
    hint = f"; last output: {shorten(last[-1], 200)}" if last else ""
    return _run_failed(
        ctx,
        None,
        f"trace pass failed: {reason}{hint}; static findings are still reported",
        confidence=Confidence.HIGH,
        observed_note=False,  # a crash, a hang, the memory: nothing says the version is why
    )


_STOPPED_WHILE = {
    "prepare": "while TensorFlow was imported",
    "import": "while the file ran",
    "build": "while its builders ran",
    "analysis": "while its models were analysed",
    "main": "while the file ran as `__main__`",
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
    if record is not None and record.phase == "main":  # mpdoctor's attempt to reach a model (issue 31), no failure
        return ctx.diagnostic(
            engine_code("cannot_trace"),
            where,
            f"not traced to the end: the trace ran out of time {place}{limit} (importing it builds no model); "
            "findings above are from what ran before (--entry a zero-argument function that builds the model "
            "traces it directly)",
            confidence=Confidence.HIGH,
            observed_note=False,
        )
    return _run_failed(
        ctx,
        where,
        f"the trace ran out of time {place}{limit}; findings above are from what ran before (raise "
        '--trace-timeout, or put training under `if __name__ == "__main__":`)',
        confidence=Confidence.HIGH,
        observed_note=False,
    )


# What a change of TensorFlow's API can raise: only these carry the "(observed on TensorFlow X; target ...)" note
# (a NameError or a SyntaxError is the code's on every version).
_API_ERRORS = frozenset(
    {"AttributeError", "ImportError", "TypeError", "ValueError", "RuntimeError", "NotImplementedError", "KeyError"}
)
_TENSORFLOW_PACKAGES = frozenset({"tensorflow", "keras", "tf_keras", "tensorflow_hub", "tensorflow_addons", "tf2onnx"})
_NAMES_TENSORFLOW = re.compile(r"\b(?:tensorflow|tf_keras|keras)\b|\btf\.\w")


def version_may_explain(exception: ExceptionRecord) -> bool:
    """Whether the installed TensorFlow being another than the target's can be why the run raised: an error an API
    change raises (never a NameError), raised in TensorFlow's or Keras' code or naming their API (`module
    'tensorflow' has no attribute 'Session'`); the project's own AttributeError on its own object is not."""
    if exception.type not in _API_ERRORS:
        return False
    frames = traceback_frames(exception.traceback or "")
    if frames and (site_module(frames[-1].file) or "").split(".")[0] in _TENSORFLOW_PACKAGES:
        return True
    return _NAMES_TENSORFLOW.search(exception.message) is not None


def unexplained_exception(ctx: TraceContext, exception: ExceptionRecord) -> Diagnostic:
    """The run raised and no rule explains the exception."""
    message = exception_summary(exception.type, exception.message, exception.phase)
    if exception.location is None:
        message += " (no frame of this file in the traceback)"
    return _run_failed(ctx, exception.location, message, observed_note=version_may_explain(exception))


def failed_elsewhere(ctx: TraceContext, exception: ExceptionRecord, cause: Diagnostic) -> Diagnostic:
    """The run failed in another module of the project at a line a finding of that module explains (MP103's
    removed `mixed_precision.experimental` in the module every other one imports): reported there, once; here an
    info pointing at it, never the MP001 error again in every importer."""
    where = f"{cause.location.path}:{cause.location.line}"
    diagnostic = _run_failed(
        ctx,
        exception.location,
        f"not traced: the run failed in {where}, reported there as {cause.code}; static findings only",
        confidence=Confidence.HIGH,
        observed_note=False,
    )
    return replace(diagnostic, severity=Severity.INFO)


def not_installed(ctx: TraceContext, exception: ExceptionRecord, module: str) -> Diagnostic:
    """The run stopped on a third-party module not installed where mpdoctor runs (issue 31): the environment's
    doing, not the code's, so an info finding of the code registered for it, never the MP001 error."""
    return _environment_info(
        ctx,
        exception,
        f"not traced: `{module}` is not installed here; static findings only (install the project's dependencies "
        "to trace it, or --strict-imports to make this an error)",
    )


def needs_arguments(ctx: TraceContext, exception: ExceptionRecord, names: list[str]) -> Diagnostic:
    """The run stopped because the script needs command-line arguments the trace cannot know (argparse's
    `required=True`, `Path(None)` from a `--config` not given): it cannot be traced as it is run, no error of it."""
    return _environment_info(
        ctx,
        exception,
        f"cannot trace: needs command-line arguments ({', '.join(names)}); static findings only (--entry NAME "
        "traces a zero-argument function of the file that builds the model)",
    )


def main_run_failed(ctx: TraceContext, exception: ExceptionRecord, models: int) -> Diagnostic:
    """Importing the file built no model, so the trace ran it as `__main__` (issue 31), which raised: mpdoctor's
    attempt to reach the model, never an error of the code (its data, a download, a device may be missing here)."""
    summary = shorten(f"{exception.type}: {exception.message}", 200)
    reached = f"the {models} model(s) built before it are analysed" if models else "no model was built before it"
    return _environment_info(
        ctx,
        exception,
        f"not traced to the end: importing the file builds no model, and running it as `__main__` raised {summary}; "
        f"{reached} (--entry NAME traces a zero-argument function of the file that builds the model)",
        Confidence.LOW,
    )


def not_built(ctx: TraceContext, exception: ExceptionRecord, module: str, source: str) -> Diagnostic:
    """The run stopped on the project's own Cython extension, present only as source: the environment's doing (the
    project is not built here), an info like a missing dependency."""
    return _environment_info(
        ctx,
        exception,
        f"not traced: the project's extension `{module}` is not built here (only its source "
        f"{os.path.basename(source)}); static findings only (build it, e.g. `pip install -e .`, to trace it, or "
        "--strict-imports to make this an error)",
    )


def broken_dependency(
    ctx: TraceContext, exception: ExceptionRecord, dependency: str, version: str | None, raised_in: str | None
) -> Diagnostic:
    """The run stopped while a third-party dependency imported itself, on what the installed packages lack (imgaug
    under NumPy 2, tensorflow-hub 0.8 under TensorFlow 2): the environment's doing, an info like a missing one.
    `version`: the dependency's distribution ("imgaug 0.4.0"); `raised_in`: the one whose frame raised ("numpy
    2.2.6")."""
    named = f"`{dependency}`" + (f" ({version})" if version else "")
    where = f" raised in {raised_in}" if raised_in else ""
    summary = shorten(f"{exception.type}{where}: {cause(exception.type, exception.message)}", 240)
    return _environment_info(
        ctx,
        exception,
        f"not traced: {named} does not import with the packages installed here ({summary}); static findings only "
        "(install versions of the project's dependencies that work together to trace it, or --strict-imports to "
        "make this an error)",
    )


def native_crash(ctx: TraceContext, reason: str, library: str, imported_by: str | None, line: int | None) -> Diagnostic:
    """The trace child died of a signal (SIGSEGV) while a native third-party library was being imported (torch next
    to TensorFlow): the two do not share a process here; not the code's error."""
    via = f" (imported through `{imported_by}`)" if imported_by else ""
    return ctx.diagnostic(
        engine_code("cannot_trace"),
        ctx.at_line(line),
        f"not traced: {reason} while importing `{library}`{via}, a native library incompatible with this "
        "environment (it crashed with TensorFlow loaded); static findings only (install versions that work together "
        "to trace it, or --strict-imports to make this an error)",
        confidence=Confidence.MEDIUM,
        observed_note=False,
    )


def _environment_info(
    ctx: TraceContext, exception: ExceptionRecord, message: str, confidence: Confidence = Confidence.HIGH
) -> Diagnostic:
    """A run the environment stopped, not the code: the code registered for "cannot trace" (info), no note of the
    observed TensorFlow."""
    return ctx.diagnostic(
        engine_code("cannot_trace"), exception.location, message, confidence=confidence, observed_note=False
    )


# The code's whatever stood in for its modules: it does not compile, or an import the finder did not serve (the
# project's own module, an ML framework, a real package's missing submodule).
_NOT_FROM_STAND_INS = frozenset({"SyntaxError", "IndentationError", "TabError", "ModuleNotFoundError", "ImportError"})
_STAND_IN_MARKERS = ("mpdoctor stand-in", "StandIn", "stand_ins.py")  # its repr, its type's name, its frames


def stand_in_failure(ctx: TraceContext, exception: ExceptionRecord, stand_ins: list[str]) -> Diagnostic | None:
    """--stub-missing: the run raised after the code was given stand-ins for missing modules. Their values (empty
    iterations, placeholders where data was) may be what failed, so it is not reported as the user's bug but as an
    info of the code registered for environment failures, "caused by" when the exception names a stand-in. None for
    a failure no stand-in can cause (the file does not compile)."""
    if exception.type in _NOT_FROM_STAND_INS:
        return None
    names = ", ".join(f"`{name}`" for name in stand_ins)
    text = f"{exception.message}\n{exception.traceback or ''}"
    how = "caused by" if any(marker in text for marker in _STAND_IN_MARKERS) else "possibly caused by"
    summary = shorten(f"{exception.type}: {exception.message}", 200)
    return _environment_info(
        ctx,
        exception,
        f"not traced to the end: the run raised {summary}, {how} the stand-ins for {names} (--stub-missing); "
        "static findings and what the run saw before are reported (install the missing modules to trace it fully)",
        Confidence.LOW,
    )


def stand_ins_note(stand_ins: list[str]) -> str:
    return "traced with stand-ins for: " + ", ".join(stand_ins)


def mark_stand_ins(diagnostic: Diagnostic, stand_ins: list[str]) -> Diagnostic:
    """A finding of a run that used stand-ins (--stub-missing) says so, in its message and as a note."""
    note = stand_ins_note(stand_ins)
    if note in diagnostic.notes:
        return diagnostic
    return replace(diagnostic, message=f"{diagnostic.message} ({note})", notes=(*diagnostic.notes, note))


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
    diagnostic = _run_failed(
        ctx,
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
    return _run_failed(
        ctx,
        None,
        f"internal error in {check_name} while reading the trace facts: "
        f"{type(exc).__name__}: {exc} (please report this)",
        confidence=Confidence.LOW,
    )
