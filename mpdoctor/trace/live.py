"""The trace pass on a live model object, in this process (the Jupyter `%mpdoctor model` magic): the same facts the
trace child writes for one model (graph, SavedModel signatures, environment, numerics)
and the same trace rules, without running any file.

What an in-process run cannot know, because no hook saw the model being built: where each layer was created (findings
point at the model, not a source line), which calls set the policy, which checkpoints were restored, and whether a
layer's dtype was passed explicitly (a layer whose policy differs from the global one counts as explicit).
"""

from __future__ import annotations

from types import SimpleNamespace

from mpdoctor.config import Config
from mpdoctor.diagnostics import Diagnostic

LIVE_HOW = "live object"
_SAVEDMODEL_APIS = {"KerasLayer": "hub.KerasLayer", "TFSMLayer": "keras.layers.TFSMLayer"}


def live_facts(model, name: str) -> dict:
    import tensorflow as tf

    from mpdoctor.trace import child

    facts = {"version": child.FACTS_VERSION, "status": "ok", "environment": child._environment(tf),
             "policy_events": [], "layers": {}, "savedmodel_loads": [], "restores": [], "exports": [], "models": [],
             "exception": None, "in_process": True}
    policy = child.policy_now()
    facts["layers"] = _layer_records(model, policy)
    recorder = SimpleNamespace(layers=facts["layers"], user_file=None)
    record = child._analyse_model(name, LIVE_HOW, model, recorder, facts, {"numerics": Config().numerics.request()})
    facts["models"].append(record)
    for node in (record.get("graph") or {}).get("nodes", []):
        if node.get("savedmodel_handle"):
            facts["savedmodel_loads"].append({
                "api": _SAVEDMODEL_APIS.get(node.get("class"), node.get("class")), "handle": node["savedmodel_handle"],
                "layer_uid": node.get("uid"), "location": None,
                "savedmodel": child._read_savedmodel(node["savedmodel_handle"])})
    facts["environment"]["global_policy"] = policy
    return facts


def _layer_records(model, global_policy: str | None) -> dict:
    """facts["layers"] for the model and every layer inside it, like the hooks record them at construction."""
    from mpdoctor.trace.child import _model_classes
    from mpdoctor.trace.graph import flavour_of
    from mpdoctor.trace.hooks import _policy_name

    try:
        layers = list(model._flatten_layers(include_self=True, recursive=True))
    except Exception:  # noqa: BLE001 - an object without Keras' layer tracking: only itself
        layers = [model]
    model_classes = _model_classes()
    records = {}
    for layer in layers:
        policy, compute, variable = _policy_name(layer)
        records[str(id(layer))] = {
            "name": getattr(layer, "name", None), "class": type(layer).__name__, "module": type(layer).__module__,
            "flavour": flavour_of(layer), "policy": policy, "compute_dtype": compute, "variable_dtype": variable,
            "autocast": bool(getattr(layer, "autocast", getattr(layer, "_autocast", True))),
            "explicit_dtype": policy if policy and policy != global_policy else None, "created_at": None,
            "is_model": isinstance(layer, model_classes),
        }
    return records


def check_live_model(model, name: str, config: Config | None = None):
    """(diagnostics, trace summary) of one live model: the trace rules on its in-process facts."""
    from mpdoctor.engine import finish
    from mpdoctor.trace.checks import diagnose, trace_summary
    from mpdoctor.trace.context import TraceContext

    config = config or Config()
    shown = f"<model {name}>"
    facts = live_facts(model, name)
    context = TraceContext(shown, shown, "", None)
    diagnostics: list[Diagnostic] = diagnose(facts, None, "", context, config)
    return finish(diagnostics, "", shown, config, ran_passes="T"), trace_summary(shown, facts, None)
