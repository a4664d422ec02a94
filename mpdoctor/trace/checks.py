"""Run the trace child for one file and turn its facts into diagnostics (parent side, no TensorFlow).

MP001 is raised here, after every trace check ran: an exception is "explained" only when the rule its message
points at (mpdoctor.trace.exceptions) actually reported something.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from mpdoctor.config import Config
from mpdoctor.diagnostics import Confidence, Diagnostic, Severity
from mpdoctor.notebook import NotebookError, is_notebook, read_notebook
from mpdoctor.registry import trace_checks
from mpdoctor.rules.numerics import static_verdicts
from mpdoctor.static.context import Settings
from mpdoctor.trace.context import TraceContext
from mpdoctor.trace.facts import first_message_line
from mpdoctor.trace.runner import run_trace


def trace_summary(shown: str, facts: dict | None, failure: str | None) -> dict:
    """What the report keeps of a trace: the models' graphs (nodes and edges with dtypes) and numerics, the SavedModels
    read, the range audits of restored (or --checkpoint) checkpoints and the environment, for the JSON/HTML output
    and other tools."""
    facts = facts or {}
    return {"path": shown, "status": "failed" if failure else facts.get("status", "ok"), "failure": failure,
            "environment": facts.get("environment", {}),
            "models": [{"name": m.get("name"), "how": m.get("how"), "graph": m.get("graph"),
                        "numerics": numerics_table(m.get("numerics"))}
                       for m in facts.get("models", [])],
            "checkpoints": [{key: restore.get(key) for key in ("api", "path", "location", "audit", "audit_error")}
                            for restore in facts.get("restores", []) if "audit" in restore or "audit_error" in restore],
            "savedmodels": [{"api": load.get("api"), "handle": load.get("handle"), "savedmodel": load.get("savedmodel")}
                            for load in facts.get("savedmodel_loads", [])]}


_NUMERICS_KEYS = ("dtype", "reference_dtype", "batch_size", "seed", "skipped", "layers")


def numerics_table(record: dict | None) -> dict | None:
    """The report's per-layer numerics table (float16 vs float32 statistics) of one model, None when not run."""
    if not record:
        return None
    table = {key: record.get(key) for key in _NUMERICS_KEYS}
    table["layers"] = table["layers"] or []
    return table


def trace_diagnostics(path: str, shown: str, text: str, tree: ast.Module, config: Config, settings: Settings,
                      options, summaries: list | None = None, run_from: str | None = None
                      ) -> tuple[list[Diagnostic], dict]:
    """Trace diagnostics, and the trace's verdicts on static findings (see `static_after_trace`). `run_from`: a
    file holding `text` (a candidate fix) that the child runs as if it were `path`."""
    outcome = run_trace(path, entry=options.entry, timeout=options.timeout, checkpoints=options.checkpoints,
                        source=text if is_notebook(path) else None, run_from=run_from,
                        numerics=getattr(options, "numerics", None), memory_limit_mb=options.memory_limit_mb)
    ctx = TraceContext(path, shown, text, tree, settings)
    facts = outcome.facts
    failure = outcome.failure or _changed_during_trace(run_from or path, text)
    if summaries is not None:
        summaries.append(trace_summary(shown, facts, failure))
    verdicts: dict = dict.fromkeys(cleared_static(facts, ctx))
    if config.enabled("MP403", shown) or config.enabled("MP407", shown):
        verdicts.update(static_verdicts(facts, ctx))
    return diagnose(facts, failure, outcome.output_tail, ctx, config), verdicts


def _changed_during_trace(path: str, text: str) -> str | None:
    """The model code deleted or rewrote its own file: the findings describe the text read before the run."""
    from pathlib import Path

    from mpdoctor.engine import read_source

    try:
        now = read_notebook(Path(path)).source if is_notebook(path) else read_source(Path(path))
    except OSError:
        return "the model code deleted or moved this file while it ran (findings refer to the text read before)"
    except (UnicodeDecodeError, SyntaxError, NotebookError):
        now = None
    if now != text:
        return "the model code rewrote this file while it ran (findings refer to the text read before)"
    return None


def cleared_static(facts: dict | None, ctx: TraceContext) -> set[tuple[str, int]]:
    """A restore the static pass expected to fail on dtypes (MP301) that the run completed without error."""
    cleared = set()
    for restore in (facts or {}).get("restores", []):
        if restore.get("error") is None:
            for where in (restore.get("location"), restore.get("receiver_created_at")):
                if where and ctx.shown(where.get("file")) == ctx.display_path:
                    cleared.add(("MP301", where["line"]))
    return cleared


def static_after_trace(static: list[Diagnostic], verdicts: dict) -> list[Diagnostic]:
    """Static findings with the trace's verdicts applied, {(code, line) or (code, line, column): None (drop) |
    ("confirm" | "downgrade", reason)}: confirmed ones become static+trace, high confidence; downgraded ones info,
    low confidence; both get the reason as a note."""
    kept = []
    for d in static:
        key = next((k for k in ((d.code, d.location.line, d.location.column), (d.code, d.location.line))
                    if k in verdicts), None)
        if key is None:
            kept.append(d)
        elif verdicts[key] is not None:
            verdict, reason = verdicts[key]
            if verdict == "confirm":
                kept.append(replace(d, passes=("static", "trace"), confidence=Confidence.HIGH,
                                    notes=d.notes + (reason,)))
            else:
                kept.append(replace(d, severity=Severity.INFO, confidence=Confidence.LOW, notes=d.notes + (reason,)))
    return kept


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
