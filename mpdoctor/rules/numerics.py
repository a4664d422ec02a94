"""Trace forms of the numerics rules: MP404, MP405 (defined in rules/outputs.py), MP403 / MP407 (defined in
rules/layer_code.py), MP503 (defined in rules/training.py), all read from the `numerics` record the trace child
writes per model (mpdoctor/trace/numerics.py):

    {"dtype", "reference_dtype", "batch_size", "seed", "skipped", "threshold",
     "layers": [{"id", "name", "class", "finite", "finite_reference", "max_abs", "max_abs_reference",
                 "relative_error"}],                      # in the order the layers' calls returned (topological)
     "first_non_finite": {"id", "op", "inputs_finite"} | None,
     "user_layers": [{"id", "class", "source_lines", "status", "float16_lines", "constants": [{"line", "op",
                      "value"}], "ops": [{"line", "op"}]}],
     "loss": {"name", "predictions", "dtype", "error"} | None}

MP403 / MP407 trace forms confirm or downgrade the static findings rather than re-deciding them: the static pass
knows which uses are guarded (a stable softmax's exp, a log of `x + eps`), the trace knows what actually ran in
float16. A static finding whose use line has the offending float16 constant / op in the traced graph is confirmed
(passes static+trace, high confidence); one whose use lines all lie in a traced user layer without any float16 op
on them is downgraded to info with the reason (`static_verdicts`, applied by the engine). The trace raises MP403
by itself only for an out-of-range literal it saw as inf/0 in a float16 graph on a line no static finding uses.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from mpdoctor.diagnostics import Diagnostic
from mpdoctor.registry import trace_check
from mpdoctor.rules import training  # noqa: F401 - defines MP503 before its trace check registers
from mpdoctor.rules.layer_code import (
    float16_problem,
    unsafe_constant_findings,
    unsafe_op_findings,
)
from mpdoctor.rules.outputs import (
    float32_output_fix,
    output_nodes,
    saturating_activation,
)
from mpdoctor.trace.context import TraceContext
from mpdoctor.trace.facts import low_precision

DEFAULT_THRESHOLD = 0.05
# float16's smallest normal number: below it float16 holds only subnormals (fewer than 10 significant bits), so a
# layer whose float32 output never reaches it is underflow territory, not a precision divergence. Untrained
# networks in inference mode get there (MobileNetV2 weights=None decays to 1e-11 by its last blocks).
FLOAT16_MIN_NORMAL = 6.103515625e-05
# The threshold is stated for float16; bfloat16 keeps 8 significand bits instead of 11, so its rounding (and any
# cancellation) is 8x larger: measured on ResNet50 / MobileNetV2 under mixed_bfloat16, up to 1.3-2.1 % per layer.
BFLOAT16_SCALE = 8.0


def numerics_records(facts: dict):
    """(model record, numerics record) for every model whose numerics ran."""
    for model in facts.get("models", []):
        record = model.get("numerics")
        if record and not record.get("skipped"):
            yield model, record


def _node(graph: dict | None, node_id: str) -> dict:
    for node in (graph or {}).get("nodes", []):
        if node["id"] == node_id:
            return node
    return {}


def _where(ctx: TraceContext, node: dict) -> dict | None:
    """The layer's constructor line, or for a custom layer class defined in this file its class line."""
    cls = ctx.static.classes.get(node.get("class")) if ctx.static is not None else None
    if node.get("kind") == "custom" and cls is not None:
        return {"file": ctx.path, "line": cls.lineno}
    return node.get("created_at")


# ------------------------------------------------------------------------------------------------------- MP404


@trace_check("MP404")
def trace_non_finite(facts: dict, ctx: TraceContext) -> Iterable[Diagnostic]:
    found = []
    for model, record in numerics_records(facts):
        first = next((row for row in record["layers"] if not row["finite"] and row["finite_reference"]), None)
        if first is None:
            continue
        node = _node(model.get("graph"), first["id"])
        culprit = record.get("first_non_finite") or {}
        op = ""
        if culprit.get("id") == first["id"] and culprit.get("op"):
            op = f" (first non-finite op: `{culprit['op']}`)"
        elif culprit.get("id") == first["id"] and culprit.get("inputs_finite") is False:
            op = " (its input is already non-finite: it comes from an operation outside any layer)"
        later = sum(1 for row in record["layers"][record["layers"].index(first) + 1:] if not row["finite"])
        found.append(ctx.diagnostic(
            "MP404", _where(ctx, node),
            f"layer `{first['id']}` ({first['class']}) of model `{model['name']}` outputs inf/NaN under "
            f"{record['dtype']}{op} while float32 with the same weights stays finite (max |x| "
            f"{_number(first['max_abs_reference'])}) on a sample batch of {record['batch_size']}; "
            f"{later} later layer{'s' if later != 1 else ''} inherit{'s' if later == 1 else ''} it. Compute this "
            f"layer in float32 (dtype=\"float32\") or make its math float16-safe", layer=first["id"]))
    return found


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


# ------------------------------------------------------------------------------------------------------- MP405


@trace_check("MP405")
def trace_precision_divergence(facts: dict, ctx: TraceContext) -> Iterable[Diagnostic]:
    found = []
    for model, record in numerics_records(facts):
        threshold = float(record.get("threshold") or DEFAULT_THRESHOLD)
        floor = FLOAT16_MIN_NORMAL
        if record["dtype"] == "bfloat16":
            threshold, floor = threshold * BFLOAT16_SCALE, 0.0  # float32's exponent range: no underflow zone
        rows = record["layers"]
        stop = next((i for i, row in enumerate(rows) if not row["finite"] and row["finite_reference"]), len(rows))
        for index, row in enumerate(rows[:stop]):
            error = row["relative_error"]
            if error is None or error <= threshold or (row["max_abs_reference"] or 0.0) < floor:
                continue
            before = _input_error(model.get("graph"), rows, row["id"])
            after = [r for r in rows[index + 1:stop] if (r["relative_error"] or 0.0) > threshold]
            final = rows[stop - 1]["relative_error"] if stop else None
            node = _node(model.get("graph"), row["id"])
            found.append(ctx.diagnostic(
                "MP405", _where(ctx, node),
                f"layer `{row['id']}` ({row['class']}) of model `{model['name']}` differs from float32 by "
                f"{error:.2%} of its range under {record['dtype']} (inputs: {_percent(before)}; threshold "
                f"{threshold:.2%}); {len(after)} later layer{'s' if len(after) != 1 else ''} stay above it, "
                f"the last layer by {_percent(final)}. Keep this layer in float32 (dtype=\"float32\") or use a "
                f"numerically stable formulation", layer=row["id"]))
            break
    return found


def _input_error(graph: dict | None, rows: list[dict], node_id: str) -> float | None:
    errors = {row["id"]: row["relative_error"] for row in rows}
    sources = [e["source"] for e in (graph or {}).get("edges", []) if e["target"] == node_id]
    known = [errors[s] for s in sources if errors.get(s) is not None]
    return max(known) if known else (0.0 if sources or not graph else None)


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"


# ------------------------------------------------------------------------------------------------------- MP503


@trace_check("MP503")
def trace_float16_loss(facts: dict, ctx: TraceContext) -> Iterable[Diagnostic]:
    """The compiled loss, fed the model's float16 predictions, computes in float16 (tf_keras losses compute in the
    predictions' dtype; Keras 3 losses cast them to their own dtype, float32 unless set otherwise). Not raised when
    MP401 already reports the output (a float16 softmax head: its fix, dtype="float32" on that layer, fixes the
    loss too); MP402 is not raised for an output that this rule reports."""
    found = []
    for model, graph, loss, output in float16_loss_outputs(facts):
        compile_line = _compile_line(ctx, model.get("name"))
        where = {"file": ctx.path, "line": compile_line} if compile_line else output.get("created_at")
        found.append(ctx.diagnostic(
            "MP503", where,
            f"the compiled loss `{loss['name']}` of model `{model['name']}` computes in {loss['dtype']}: it "
            f"receives the {'/'.join(dict.fromkeys(loss['predictions']))} output `{output['id']}` (sums overflow "
            f"at 65504, logs of small probabilities lose their precision); end the model with "
            f"Activation(\"linear\", dtype=\"float32\") or give `{output['id']}` dtype=\"float32\"",
            layer=output["id"], fix=float32_output_fix(ctx, output)))
    return found


def float16_loss_outputs(facts: dict):
    """(model, graph, loss record, output node) for model outputs whose compiled loss was observed computing in
    float16/bfloat16 and that MP401 does not already report."""
    for model, record in numerics_records(facts):
        loss = record.get("loss") or {}
        if not low_precision(loss.get("dtype")):
            continue
        graph = model.get("graph") or {}
        for node, output in output_nodes(graph):
            if low_precision(output.get("dtype")) and not saturating_activation(node):
                yield model, graph, loss, node


def _compile_line(ctx: TraceContext, model_name: str | None) -> int | None:
    """The line of `<model>.compile(...)` for the model's variable name, else of the file's first `.compile(`."""
    if ctx.static is None:
        return None
    calls = [c for c in ctx.static.calls if isinstance(c.func, ast.Attribute) and c.func.attr == "compile"]
    named = [c for c in calls if isinstance(c.func.value, ast.Name) and c.func.value.id == model_name]
    return (named or calls)[0].lineno if calls else None


# -------------------------------------------------------------------------------------------- MP403 / MP407


def _static_findings(ctx: TraceContext) -> list[tuple[Diagnostic, set[int]]]:
    """Static MP403 and MP407 findings of this file with their use lines."""
    if ctx.static is None:
        return []
    return list(unsafe_constant_findings(ctx.static)) + [(d, {d.location.line}) for d in unsafe_op_findings(ctx.static)]


def _user_layers(facts: dict) -> list[dict]:
    return [layer for _, record in numerics_records(facts) for layer in record.get("user_layers", [])
            if layer.get("status") == "ok"]


_LITERAL = re.compile(r"(?<![\w.])\d+\.?\d*[eE][-+]?\d+|(?<![\w.])\d+\.\d+")


def _line_has_literal(ctx: TraceContext, line: int, problem: str) -> bool:
    """Whether the source line holds a float literal float16 cannot represent (`problem`: overflow/underflow)."""
    if ctx.static is None or not 0 < line <= len(ctx.static.lines):
        return False
    return any(float16_problem(float(text)) == problem for text in _LITERAL.findall(ctx.static.lines[line - 1]))


def _constant_problem(constant: dict) -> str:
    return "underflow" if constant["value"] == "0" else "overflow"


def _trace_evidence(facts: dict, ctx: TraceContext):
    """Unsafe float16 constants {(line, problem): (layer, constant)} whose source line holds such a literal, and
    float16 overflow-prone ops {line: (layer, op)}, from the traced graphs of the float16 user layers."""
    layers = _user_layers(facts)
    constants = {(c["line"], _constant_problem(c)): (layer, c) for layer in layers for c in layer["constants"]
                 if _line_has_literal(ctx, c["line"], _constant_problem(c))}
    ops: dict[int, list] = {}
    for layer in layers:
        for op in layer["ops"]:
            ops.setdefault(op["line"], []).append((layer, op))
    return layers, constants, ops


@trace_check("MP403")
def trace_unsafe_constants(facts: dict, ctx: TraceContext) -> Iterable[Diagnostic]:
    """Out-of-range literals the traced float16 graph of a user layer holds as inf / 0 where the static pass found
    no MP403 use (static findings are confirmed through `static_verdicts` instead)."""
    _, constants, _ = _trace_evidence(facts, ctx)
    if not constants:
        return []
    used = set().union(*(uses for d, uses in _static_findings(ctx) if d.code == "MP403"))
    found = []
    for (line, problem), (layer, constant) in sorted(constants.items()):
        if line in used:
            continue
        what = "overflows to -inf/inf" if problem == "overflow" else "underflows to 0"
        found.append(ctx.diagnostic(
            "MP403", {"file": ctx.path, "line": line},
            f"a literal on this line {what} in float16: the traced graph of `{layer['id']}` ({layer['class']}) "
            f"feeds it to `{constant['op']}` as {constant['value']}; use a float16-safe value (-1e4, 1e-7) or "
            f"compute this part in float32", layer=layer["id"]))
    return found


def static_verdicts(facts: dict | None, ctx: TraceContext) -> dict[tuple[str, int, int], tuple[str, str]]:
    """What the trace says about the static MP403/MP407 findings, {(code, line, column): (verdict, reason)}:
    "confirm" when a use line holds the offending float16 constant / op in the traced graph of a user layer;
    "downgrade" when every use line lies in the code of a traced float16 user layer and no op of that graph
    computing in float16 comes from it (the value never reaches float16 computation)."""
    layers, constants, ops = _trace_evidence(facts or {}, ctx)
    if not layers:
        return {}
    verdicts = {}
    for static, uses in _static_findings(ctx):
        key = (static.code, static.location.line, static.location.column)
        if static.code == "MP403":
            hits = [constants[k] for k in sorted(constants) if k[0] in uses]
            if hits:
                layer, constant = hits[0]
                reason = (f"trace: the float16 graph of `{layer['id']}` holds the value as {constant['value']} in "
                          f"`{constant['op']}` on line {constant['line']}")
                verdicts[key] = ("confirm", reason)
                continue
        elif key[1] in ops:  # the op the finding names (`tf.square` -> Square), else the line's first one
            named = re.search(r"`[\w.]*?(\w+)`", static.message)
            short = named.group(1).replace("_", "").replace("reduce", "").lower() if named else ""
            layer, op = next((hit for hit in ops[key[1]] if hit[1]["op"].lower() == short), ops[key[1]][0])
            verdicts[key] = ("confirm", f"trace: `{layer['id']}` runs `{op['op']}` in float16 on line {op['line']}")
            continue
        reasons = []
        for line in sorted(uses):
            layer = next((layer for layer in layers if layer["source_lines"]
                          and layer["source_lines"][0] <= line <= layer["source_lines"][1]), None)
            if layer is None or line in layer["float16_lines"]:
                break
            reasons.append(f"line {line} computes nothing in float16 in the traced `{layer['id']}`")
        else:
            if reasons:
                verdicts.setdefault(key, ("downgrade", "trace: " + "; ".join(reasons)))
    return verdicts
