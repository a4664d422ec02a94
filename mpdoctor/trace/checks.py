"""Run the trace child for one file and turn its facts into diagnostics (parent side, no TensorFlow).

MP001 is raised here, after every trace check ran: an exception is "explained" only when the rule its message
points at (mpdoctor.trace.exceptions) actually reported something.
"""

from __future__ import annotations

import ast

from mpdoctor.config import Config
from mpdoctor.diagnostics import Confidence, Diagnostic
from mpdoctor.registry import trace_checks
from mpdoctor.static.context import Settings
from mpdoctor.trace.context import TraceContext
from mpdoctor.trace.facts import first_message_line
from mpdoctor.trace.runner import run_trace


def trace_summary(shown: str, facts: dict | None, failure: str | None) -> dict:
    """What the report keeps of a trace: the models' graphs (nodes and edges with dtypes), the SavedModels read and
    the environment, for the JSON/HTML output and other tools."""
    facts = facts or {}
    return {"path": shown, "status": "failed" if failure else facts.get("status", "ok"), "failure": failure,
            "environment": facts.get("environment", {}),
            "models": [{"name": m.get("name"), "how": m.get("how"), "graph": m.get("graph")}
                       for m in facts.get("models", [])],
            "savedmodels": [{"api": load.get("api"), "handle": load.get("handle"), "savedmodel": load.get("savedmodel")}
                            for load in facts.get("savedmodel_loads", [])]}


def trace_diagnostics(path: str, shown: str, text: str, tree: ast.Module, config: Config, settings: Settings,
                      options, summaries: list | None = None, run_from: str | None = None
                      ) -> tuple[list[Diagnostic], set[tuple[str, int]]]:
    """Trace diagnostics, and the (code, line) of static findings the run disproved."""
    outcome = run_trace(path, entry=options.entry, timeout=options.timeout, checkpoints=options.checkpoints,
                        source=run_from)
    ctx = TraceContext(path, shown, text, tree, settings)
    facts = outcome.facts
    if summaries is not None:
        summaries.append(trace_summary(shown, facts, outcome.failure))
    return diagnose(facts, outcome.failure, outcome.output_tail, ctx, config), cleared_static(facts, ctx)


def cleared_static(facts: dict | None, ctx: TraceContext) -> set[tuple[str, int]]:
    """A restore the static pass expected to fail on dtypes (MP301) that the run completed without error."""
    cleared = set()
    for restore in (facts or {}).get("restores", []):
        if restore.get("error") is None:
            for where in (restore.get("location"), restore.get("receiver_created_at")):
                if where and ctx.shown(where.get("file")) == ctx.display_path:
                    cleared.add(("MP301", where["line"]))
    return cleared


def diagnose(facts: dict | None, failure: str | None, output_tail: str, ctx: TraceContext,
             config: Config) -> list[Diagnostic]:
    """Diagnostics from one trace: every trace check, then MP001 for a failed child or an unexplained exception."""
    if facts is None:
        return [_trace_failed(ctx, failure or "the trace child reported nothing", output_tail)]
    found = run_checks(facts, ctx, config)
    if failure:
        found.append(_trace_failed(ctx, failure, output_tail))
    exception = facts.get("exception")
    if exception and exception.get("phase") != "call" and not _explained(exception, facts, found):
        found.append(_unexplained_exception(ctx, exception))
    # A failure of the one forward pass on mpdoctor's own synthetic batch (index ranges, strings, ragged inputs)
    # may be the batch's fault, not the model's: rules that recognise it report it, it is never MP001.
    return found


def run_checks(facts: dict, ctx: TraceContext, config: Config) -> list[Diagnostic]:
    found: list[Diagnostic] = []
    for codes, check in trace_checks():
        if not any(config.enabled(code, ctx.display_path) for code in codes):
            continue
        try:
            found.extend(check(facts, ctx))
        except Exception as exc:  # a bug in one trace rule must not hide the others
            found.append(ctx.diagnostic("MP001", None, f"internal error in {check.__name__} while reading the "
                                        f"trace facts: {type(exc).__name__}: {exc} (please report this)",
                                        confidence=Confidence.LOW))
    return found


def _explained(exception: dict, facts: dict, found: list[Diagnostic]) -> bool:
    """Whether a reported finding explains the run's exception: the rule its message points at reported, or a
    SavedModel load that raised is already reported as unreadable (MP202)."""
    from mpdoctor.trace.exceptions import classify_exception

    verdict = classify_exception(exception.get("type", ""), exception.get("message", ""))
    if verdict and any(d.code == verdict["code"] for d in found):
        return True
    failed_loads = [load for load in facts.get("savedmodel_loads", [])
                    if load.get("error") and (load.get("savedmodel") or {}).get("error")]
    return bool(failed_loads) and any(d.code == "MP202" for d in found)


def _unexplained_exception(ctx: TraceContext, exception: dict) -> Diagnostic:
    phase = {"import": "importing the file", "build": "building the model", "call": "calling the model on a sample "
             "batch", "internal": "tracing the file"}.get(exception.get("phase", ""), "tracing the file")
    message = f"{phase} raised {exception.get('type', 'an exception')}: {first_message_line(exception.get('message', ''))}"
    if not exception.get("location"):
        message += " (no frame of this file in the traceback)"
    return ctx.diagnostic("MP001", exception.get("location"), message)


def _trace_failed(ctx: TraceContext, reason: str, output_tail: str) -> Diagnostic:
    last = [line for line in output_tail.strip().splitlines() if line.strip()]
    hint = f"; last output: {last[-1][:200]}" if last else ""
    return ctx.diagnostic("MP001", None, f"trace pass failed: {reason}{hint}; static findings are still reported",
                          confidence=Confidence.HIGH)
