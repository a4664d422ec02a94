"""Renderers of `mpdoctor plan`: the plans held by the report's traces (and the plan's fix), as text or JSON."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TextIO

from mpdoctor._version import __version__
from mpdoctor.facts.dtypes import compute_dtype
from mpdoctor.facts.schema import FAILED_BUILD, Environment, GradientRecord, PlanCheck, PlanRecord, TraceSummary
from mpdoctor.printable import escape_controls

if TYPE_CHECKING:
    from mpdoctor.plan import PlanResult

SCHEMA_VERSION = 1


def render_text(result: PlanResult, stream: TextIO) -> None:
    """The plan as lines of text, each escaped alone (paths, model and layer names, the trace's failure come from
    user code: an escape sequence or a newline in them must not reach the terminal or forge a line)."""

    def write(line: str) -> None:
        stream.write(escape_controls(line) + "\n")

    trace = result.trace
    if trace is not None and trace.failure:
        write(f"{result.shown}: the trace failed: {trace.failure}")
    for constant in result.constant_fixes:
        write(
            f"{result.shown}: {constant.describe()}, the cheapest fix `check` offers (no multiply-add leaves "
            f"float16); the plan below is measured with it. MP403: {constant.message}"
        )
    plans = result.plans()
    if not plans and not (trace is not None and trace.failure):
        write(f"{result.shown}: no model to plan: {_no_model_reason(trace)}")
    for name, plan in plans:
        for line in _model_lines(result.shown, name, plan, trace):
            write(line)
    fix = result.fix
    if fix is not None:
        for line in fix.not_applied:
            write(f"  not applied: {line}")
        if fix.error:
            write(f"{result.shown}: plan not applied: {fix.error}")
        elif fix.changed and fix.written:
            write(f"{result.shown}: plan written into the file; {fix.verification}")
        elif fix.changed:  # --diff: shown, still to be applied (exit 1), so not called verified
            write(f"{result.shown}: plan shown as a diff, not written (--diff); re-traced with it: {fix.outcome}")


def _no_model_reason(trace: TraceSummary | None) -> str:
    """Why the trace gave no model: the run's exception (a model that failed to build), else none was found."""
    if trace is not None and trace.exception:
        line = f" (line {trace.exception_line})" if trace.exception_line else ""
        return f"{trace.exception}{line}"
    return "the trace found none (see `mpdoctor check` for how models are found)"


def _model_lines(shown: str, name: str | None, plan: PlanRecord, trace: TraceSummary | None) -> list[str]:
    environment = trace.environment if trace is not None else None
    head = f"{shown}: model `{name}`"
    if plan.skipped == FAILED_BUILD and trace is not None and trace.exception:
        return [f"{head}: no plan: {plan.skipped}: {_no_model_reason(trace)}"]
    if plan.skipped:
        return [f"{head}: no plan: {plan.skipped}"]
    lines = []
    if plan.mode == "verify":
        check = plan.final
        return [f"{head} under {plan.policy}: {_state(check, plan.rtol)}"]
    kept = len(plan.layers)
    lines.append(
        f"{head} under {plan.policy} (rtol {plan.rtol:g}): keep {kept} of {plan.candidates} layer"
        f"{'s' if plan.candidates != 1 else ''} in float32" + (":" if kept else "")
    )
    for layer in plan.layers:
        where = f", line {layer.created_at.line}" if layer.created_at and layer.created_at.line else ""
        share = f"; {layer.flops / plan.total_flops:.1%} of the multiply-adds" if plan.total_flops else ""
        lines.append(f"  {layer.id} ({layer.class_name}{where}): {layer.detail}{share}")
    if plan.low_precision_share is not None:
        lines.append(
            f"  still in {compute_dtype(plan.policy)}: {plan.low_precision_share:.1%} of the model's multiply-adds "
            "(estimated per layer)"
        )
    if plan.initial is not None:
        lines.append(f"  with nothing in float32: {_state(plan.initial, plan.rtol)}")
    if plan.final is not None:
        lines.append(f"  with the plan: {_state(plan.final, plan.rtol)}")
        if plan.final.gradients is not None and not plan.final.gradients.skipped:
            lines.append(f"  training step with the plan: {_gradient_state(plan.final.gradients)}")
    if plan.gradient_advice:
        lines.append(f"  gradients: {plan.gradient_advice}")
    lines.append(
        f"  forward passes: {plan.forward_passes} (a one-layer-at-a-time sweep: {plan.naive_passes}); "
        f"{plan.seconds:.1f} s"
    )
    alternative = plan.bfloat16
    if alternative is not None:
        if alternative.passed:
            hardware = _bfloat16_hardware(environment)
            lines.append(
                "  alternative: mixed_bfloat16 passes with no layer in float32 (max relative error "
                f"{_percent(alternative.max_relative_error)}); {hardware}"
            )
        else:
            lines.append(f"  mixed_bfloat16 with no layer in float32: {_state(alternative, plan.rtol)}")
    lines += [f"  note: {note}" for note in dict.fromkeys(plan.notes)]
    return lines


def _state(check: PlanCheck | None, rtol: float) -> str:
    if check is None:
        return "not checked"
    if not check.finite:
        return "outputs non-finite"
    # never "verified": that word is for a plan written into the file and re-checked (the runs that exit 0)
    side = "within" if check.passed else "above"
    return f"outputs finite, max relative error {_percent(check.max_relative_error)}, {side} rtol {rtol:.2%}"


def _gradient_state(record: GradientRecord) -> str:
    scaling = "no loss scaling" if record.loss_scaling == "none" else f"loss scale {record.loss_scale:g}"
    return (
        f"{record.flushed_share:.1%} of the gradient values nonzero in float32 flush to zero ({scaling}, {record.loss})"
    )


def _bfloat16_hardware(environment: Environment | None) -> str:
    """Whether this machine computes bfloat16 natively (the trace's environment)."""
    if environment is not None and environment.cpu_bf16:
        return "this CPU has bfloat16 instructions (AVX512-BF16/AMX)"
    capabilities = [g.compute_capability for g in (environment.gpus if environment else []) if g.compute_capability]
    if any(capability[0] >= 8 for capability in capabilities):
        return "this machine's GPU computes bfloat16 natively (compute capability >= 8.0)"
    return "fast only on hardware with bfloat16 (TPUs, GPUs of compute capability >= 8.0, CPUs with AVX512-BF16/AMX)"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"


def render_json(result: PlanResult, stream: TextIO) -> None:
    trace = result.trace
    models = []
    for model in trace.models if trace else []:
        if model.plan is None:
            continue
        models.append(
            {
                "name": model.name,
                "plan": model.plan.to_json(),
                "low_precision_share": model.plan.low_precision_share,
                "numerics": model.numerics.to_json() if model.numerics else None,
            }
        )
    document = {
        "version": SCHEMA_VERSION,
        "tool": {"name": "mpdoctor", "version": __version__},
        "path": result.shown,
        "failure": trace.failure if trace else None,
        "environment": trace.environment.to_json() if trace and trace.environment else None,
        "models": models,
        "fix": result.fix.to_dict() if result.fix else None,
        "constant_fixes": [constant.to_dict() for constant in result.constant_fixes],
    }
    json.dump(document, stream, indent=2, default=str)
    stream.write("\n")
