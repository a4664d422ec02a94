"""Read-only helpers over the trace facts (the JSON the child writes; schema in mpdoctor/trace/child.py)."""

from __future__ import annotations

import re

from mpdoctor.static.policies import compute_dtype, is_float16_compute

FLOAT16_DTYPES = ("float16", "bfloat16")


def low_precision(dtype: str | None) -> bool:
    return dtype in FLOAT16_DTYPES


def layer_record(facts: dict, uid: str | None) -> dict | None:
    return facts.get("layers", {}).get(uid) if uid else None


def final_policy(facts: dict) -> str | None:
    return facts.get("environment", {}).get("global_policy")


def policy_compute(policy: str | None) -> str | None:
    return compute_dtype(policy)


def float16_policy_events(facts: dict) -> list[dict]:
    return [e for e in facts.get("policy_events", []) if is_float16_compute(e.get("policy"))]


def graphs(facts: dict):
    """(model record, graph) for every analysed model that has a graph."""
    for model in facts.get("models", []):
        if model.get("graph"):
            yield model, model["graph"]


def keras_major(facts: dict) -> int:
    return int(facts.get("environment", {}).get("keras_major") or 3)


def exception_verdict(facts: dict) -> dict | None:
    """What mpdoctor.trace.exceptions makes of the run's exception: {"code": "MP201", ...} or None."""
    exception = facts.get("exception")
    if not exception:
        return None
    from mpdoctor.trace.exceptions import classify_exception

    return classify_exception(exception.get("type", ""), exception.get("message", ""))


def first_message_line(message: str) -> str:
    """The line of an exception message that says what went wrong (not Keras' "Exception encountered when
    calling layer ..." wrapper), at most 300 characters."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    for line in lines:  # a graph-mode error quotes the real exception inside "in user code:"
        if re.match(r"\w+(Error|Exception): ", line):
            return line[:300]
    interesting = [line for line in lines if not line.startswith(("Exception encountered", "Traceback", "File ",
                                                                   "in user code:", "Call arguments received"))]
    return (interesting or lines or [""])[0][:300]
