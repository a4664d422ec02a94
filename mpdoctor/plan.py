"""`mpdoctor plan`, parent side: trace the file like `check` with a plan request (the child's part is
mpdoctor/trace/child/plan.py), then turn each model's plan into code and verify it.

The plan as code: a layer created by its own constructor call in the checked file gets `dtype="float32"` there (the
same keyword edit as every dtype fix); any other layer (created inside a library such as keras.applications or
keras-hub, or by a constructor line that creates several layers, a loop) is switched by a short snippet inserted
after the statement that builds the model (mpdoctor.facts.keras_semantics.keep_float32_snippet). The edited text is
then traced again from a temporary copy, in verify mode (the file as it is under the policy, once, against float32),
and written (--fix) or shown (--diff) only when that check passes.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path

from mpdoctor.config import Config
from mpdoctor.diagnostics import Edit, Report
from mpdoctor.facts.keras_semantics import KERAS3, TF_KERAS, keep_float32_snippet
from mpdoctor.facts.schema import PlanLayer, PlanRecord, TraceSummary
from mpdoctor.facts.trace_request import PLAN_RTOL, PlanRequest
from mpdoctor.fix.apply import apply_edits, unified_diff


@dataclass
class PlanFix:
    """The plan as code for one file, and what its verification found."""

    shown: str
    original: str
    fixed: str
    applied: list[str] = field(default_factory=list)  # one line per layer: how it is kept in float32
    not_applied: list[str] = field(default_factory=list)  # layers the edits could not reach, and why
    verification: str = "unverified"
    outcome: str = ""  # what the re-trace with the plan showed ("outputs finite, max relative error 0.03%, ...")
    verified: bool = False
    max_relative_error: float | None = None
    written: bool = False
    error: str | None = None

    @property
    def changed(self) -> bool:
        return self.fixed != self.original

    def diff(self) -> str:
        if not self.changed:
            return ""
        return unified_diff(self.original, self.fixed, self.shown)

    def to_dict(self) -> dict:
        return {
            "path": self.shown,
            "applied": self.applied,
            "not_applied": self.not_applied,
            "verification": self.verification,
            "verified": self.verified,
            "max_relative_error": self.max_relative_error,
            "written": self.written,
            "error": self.error,
        }


@dataclass
class ConstantFix:
    """A fix `check` offers (MP403: a float16-safe constant) taken instead of keeping a layer in float32: the
    cheapest fix, no multiply-add leaves float16."""

    layer: str  # the plan layer's id
    line: int  # the line using the constant
    message: str  # MP403's message
    edits: tuple[Edit, ...]

    def describe(self) -> str:
        return f"`{self.layer}`: MP403's constant fix at line {self.line} instead of float32"

    def to_dict(self) -> dict:
        return {"layer": self.layer, "line": self.line, "code": "MP403", "message": self.message}


@dataclass
class PlanResult:
    report: Report  # the check of the file, traced with the plan request: its traces hold the plans
    shown: str
    fix: PlanFix | None = None
    # taken instead of float32 layers; the report's trace is then the plan traced again with them applied
    constant_fixes: list[ConstantFix] = field(default_factory=list)

    @property
    def trace(self) -> TraceSummary | None:
        return self.report.traces[0] if self.report.traces else None

    def plans(self) -> list[tuple[str | None, PlanRecord]]:
        trace = self.trace
        return [(m.name, m.plan) for m in trace.models if m.plan is not None] if trace else []


def plan_request(policy: str | None, rtol: float | None, *, verify: bool = False) -> PlanRequest:
    return PlanRequest(policy, PLAN_RTOL if rtol is None else rtol, verify)


def make_plan(path: Path, config: Config, trace) -> PlanResult:
    """Trace `path` with the plan request in `trace.plan` (an engine TraceOptions)."""
    from mpdoctor.engine import check_paths, display_path

    report = check_paths([path], config, trace)
    result = PlanResult(report, display_path(path))
    _prefer_constant_fixes(result, path, config, trace)
    return result


def _prefer_constant_fixes(result: PlanResult, path: Path, config: Config, trace) -> None:
    """A layer kept in float32 for a constant that float16 cannot hold (-1e9) is made float16-safe by MP403's fix
    instead when `check` offers one: the plan is traced again on the text with those fixes, and taken when that plan
    passes without the layer (the fixes and the new plan together are what --fix writes)."""
    from mpdoctor.fix.verify import trace_as
    from mpdoctor.sources import read_source

    offered: dict[int, tuple[str, tuple[Edit, ...]]] = {}
    for diagnostic in result.report.diagnostics:
        if diagnostic.code == "MP403" and diagnostic.fix is not None:
            for line in {diagnostic.location.line, *(edit.line for edit in diagnostic.fix.edits)}:
                offered.setdefault(line, (diagnostic.message, diagnostic.fix.edits))
    fixes = [
        ConstantFix(layer.id, layer.constant_line, *offered[layer.constant_line])
        for _, plan in result.plans()
        if not plan.skipped and plan.mode == "plan"
        for layer in plan.layers
        if layer.reason == "constant" and layer.constant_line is not None and layer.constant_line in offered
    ]
    edits = list(dict.fromkeys(edit for fix in fixes for edit in fix.edits))
    # Line numbers must stay those of the traced text: the new plan's layers are placed by them.
    if not edits or any(e.content.count("\n") != e.end_line - e.line for e in edits):
        return
    try:
        text = read_source(path)
        fixed = apply_edits(text, edits)
    except (OSError, ValueError):
        return
    summaries: list = []
    _, error = trace_as(path, result.shown, fixed, config, trace, summaries, prefix="mpdoctor-plan-")
    summary = summaries[0] if summaries else None
    if error is not None or summary is None or summary.failure:
        return
    replaced = {fix.layer for fix in fixes}
    plans = [m.plan for m in summary.models if m.plan is not None]
    if plans and all(
        not p.skipped and p.final is not None and p.final.passed and not {layer.id for layer in p.layers} & replaced
        for p in plans
    ):
        result.constant_fixes = fixes
        result.report.traces[0] = summary  # what the text and HTML reports show: the plan with the fixes


# ------------------------------------------------------------------------------------------------ plan as code


def plan_edits(result: PlanResult, path: Path, text: str) -> PlanFix:
    """The edits that keep every planned layer of every model in float32."""
    from mpdoctor.engine import parse_source
    from mpdoctor.static.edits import module_alias
    from mpdoctor.static.semantic import Settings
    from mpdoctor.trace_context import TraceContext

    fix = PlanFix(result.shown, text, text)
    tree, error = parse_source(text, result.shown)
    if tree is None:
        fix.error = error.message if error else "the file does not parse"
        return fix
    ctx = TraceContext(str(path), result.shown, text, tree, Settings())
    edits: list[Edit] = list(dict.fromkeys(edit for constant in result.constant_fixes for edit in constant.edits))
    fix.applied += [constant.describe() for constant in result.constant_fixes]
    for _model_name, plan in result.plans():
        if plan.skipped or plan.mode != "plan":
            continue
        rest: list[PlanLayer] = []
        for layer in plan.layers:
            keyword = None
            if layer.user_code and layer.created_with == 1:
                keyword = ctx.float32_fix(layer.created_at, (layer.class_name,), 'dtype="float32"')
            if keyword is not None:
                edits += keyword.edits
                fix.applied.append(f'{layer.id}: dtype="float32" at line {layer.created_at.line}')
            else:
                rest.append(layer)
        if not rest:
            continue
        snippet = _snippet_edit(ctx, plan, rest, module_alias)
        if isinstance(snippet, str):
            fix.not_applied += [f"{layer.id}: {snippet}" for layer in rest]
            continue
        edits.append(snippet)
        line = plan.model_location.line if plan.model_location else "?"
        fix.applied += [f"{layer.id}: set to float32 after the model is built (line {line})" for layer in rest]
    if edits:
        try:
            fix.fixed = apply_edits(text, edits)
        except ValueError as exc:
            fix.error = f"the plan's edits overlap: {exc}"
    return fix


def _snippet_edit(ctx, plan: PlanRecord, layers: list[PlanLayer], module_alias) -> Edit | str:
    """The snippet after the statement that builds the model, or why there is none."""
    static = ctx.static
    where = plan.model_location
    if static is None or where is None or not where.line or os.path.realpath(where.file or "") != ctx.path:
        return "the model is not built in this file: no place to switch the layer after the build"
    statement = next(
        (
            node
            for node in static.nodes
            if isinstance(node, ast.Assign | ast.Return) and node.lineno <= where.line <= node.end_lineno
        ),
        None,
    )
    if isinstance(statement, ast.Assign):
        if len(statement.targets) != 1 or not isinstance(statement.targets[0], ast.Name):
            return "the model is not assigned to a plain name"
        name = statement.targets[0].id
        prefix = ""
    elif isinstance(statement, ast.Return) and statement.value is not None:
        name, prefix = "model", None
    else:
        return "the statement that builds the model is neither `name = ...` nor `return ...`"
    line_text = static.lines[statement.lineno - 1]
    indent = line_text[: len(line_text) - len(line_text.lstrip())]
    # The rebuild needs the Keras 2 module by the name the file gave it: tf_keras (or Keras 2.13-2.15's `keras`),
    # else tf.keras.
    keras_module = module_alias(static.semantic, "tf_keras" if plan.flavour == TF_KERAS else "keras") or (
        f"{module_alias(static.semantic, 'tensorflow')}.keras" if module_alias(static.semantic, "tensorflow") else None
    )
    snippet = keep_float32_snippet(plan.flavour or "", name, [layer.path for layer in layers], keras_module, indent)
    if not snippet or (plan.flavour != KERAS3 and keras_module is None):
        return "no snippet for this Keras line (tf_keras: only top-level layers of a functional or Sequential model)"
    newline = "\r\n" if "\r\n" in ctx.text else "\n"
    snippet = snippet.replace("\n", newline)
    if prefix is None:  # `return build(...)`: bind it, switch the layers, return it
        value = static.segment(statement.value)
        text = f"{indent}{name} = {value}{newline}{snippet}{indent}return {name}{newline}"
        return Edit(ctx.display_path, statement.lineno, 1, statement.end_lineno + 1, 1, text)
    line = statement.end_lineno + 1
    return Edit(ctx.display_path, line, 1, line, 1, snippet)


def verify_plan(fix: PlanFix, path: Path, config: Config, trace, policy: str | None, rtol: float | None) -> None:
    """Trace the fixed text (from a temporary copy that runs as `path`) in verify mode: every model's outputs
    under the policy, the file as it now is, against float32."""
    from dataclasses import replace

    from mpdoctor.fix.verify import round_trip_problem, trace_as

    problem = round_trip_problem(fix.fixed)
    if problem:
        fix.error = problem
        return
    summaries: list = []
    options = replace(trace, plan=plan_request(policy, rtol, verify=True))
    _, error = trace_as(path, fix.shown, fix.fixed, config, options, summaries, prefix="mpdoctor-plan-")
    if error is not None:
        fix.error = f"the fixed file cannot be checked: {error.message}"
        return
    summary = summaries[0] if summaries else None
    if summary is None or summary.failure:
        fix.error = f"re-tracing the fixed file failed: {summary.failure if summary else 'no trace'}"
        return
    checks = [m.plan.final for m in summary.models if m.plan is not None and m.plan.final is not None]
    if not checks:
        reasons = [m.plan.skipped for m in summary.models if m.plan is not None and m.plan.skipped]
        fix.error = "re-tracing the fixed file: " + (reasons[0] if reasons else "no model was checked")
        return
    errors = [c.max_relative_error for c in checks if c.max_relative_error is not None]
    fix.max_relative_error = max(errors) if errors else None
    if all(c.passed for c in checks):
        fix.verified = True
        fix.outcome = f"outputs finite, max relative error {_percent(fix.max_relative_error)}, within rtol"
        fix.verification = f"verified: outputs finite, max relative error {_percent(fix.max_relative_error)}"
    else:
        finite = all(c.finite for c in checks)
        fix.outcome = (
            f"max relative error {_percent(fix.max_relative_error)} above rtol"
            if finite
            else "outputs still non-finite"
        )
        fix.verification = f"not verified: {fix.outcome}"
        fix.error = f"the fixed file does not pass ({fix.verification})"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"
