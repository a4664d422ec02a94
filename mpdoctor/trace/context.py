"""Where `TraceContext` was: it lives in mpdoctor.trace_context now, a layer the rules and the trace both import.
Re-exported until the rule modules import it from there."""

from mpdoctor.trace_context import TraceContext

__all__ = ["TraceContext"]
