"""The trace pass on a live model object, in this process (the Jupyter `%mpdoctor model` magic): the facts the trace
child would write for one model (mpdoctor.trace.child.live_facts) and the same trace rules, without running any
file. Findings point at the model, not at source lines: no hook saw the model being built."""

from __future__ import annotations

from mpdoctor.config import Config
from mpdoctor.diagnostics import Diagnostic
from mpdoctor.facts.schema import TraceSummary


def check_live_model(model, name: str, config: Config | None = None) -> tuple[list[Diagnostic], TraceSummary]:
    """(diagnostics, trace summary) of one live model: the trace rules on its in-process facts."""
    from mpdoctor.engine import finish
    from mpdoctor.trace.checks import diagnose
    from mpdoctor.trace.child import live_facts
    from mpdoctor.trace_context import TraceContext

    config = config or Config()
    shown = f"<model {name}>"
    facts = live_facts(model, name, config.numerics.request())
    context = TraceContext(shown, shown, "", None)
    diagnostics = diagnose(facts, None, "", context, config)
    return finish(diagnostics, "", shown, config, ran_passes="T"), TraceSummary.of(shown, facts, None)
