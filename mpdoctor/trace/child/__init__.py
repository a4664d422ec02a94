"""The part of the trace pass that runs inside the user's process: the child process (`python -m
mpdoctor.trace.child`, main.py) and, for Jupyter, the kernel itself (`live_facts`). It imports TensorFlow and Keras,
and of mpdoctor only `mpdoctor.facts` and the artifact readers; what leaves it is `mpdoctor.facts.schema.Facts`.

- main.py: the child process: run the file under hooks, discover its models, write the facts.
- hooks.py, keras_adapter.py, adapters/: what is recorded while the file runs; which Keras each package is and the
  adapter (one module per Keras line) holding that line's internals.
- discovery.py, analysis.py: which models, and what is found out about each (its call, graph, numerics).
- graph.py, numerics.py, matching.py: the dtype graph, float16 vs float32 per layer, checkpoint matching; the
  graph reads layers through layer_api.py, predicts dtypes with dtype_prediction.py and probes subclassed models
  with probe.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpdoctor.facts.trace_request import NumericsRequest


def live_facts(model, name: str, numerics_request: NumericsRequest | None = None):
    """The facts of one live model object, in this process (mpdoctor.trace.child.analysis.live_facts)."""
    from mpdoctor.trace.child.analysis import live_facts as build

    return build(model, name, numerics_request)
