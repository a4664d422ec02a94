"""The behavioural check of a training fix (issue 19): the fixed step's weight update against the float32 step's,
run by the trace child (trace/child/step_check.py) on the module-level function or method that holds the fixes."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from mpdoctor.diagnostics import Diagnostic
from mpdoctor.fix.rounds import line_mapper, parsed
from mpdoctor.static.training_steps import not_a_step, step_units

# Agreement with the float32 step: the direction of the weight update, and its size within a factor of two. The
# loss-scaling mistakes this is for move the weights 2**15 times too far or too little (scaled twice, never unscaled,
# clipped while scaled), not at all, or with gradients lost to float16 (cosine 0.76 in tests/data/training_scripts).
# A right step computes in float16 all the same, and CPUs differ in how their float16 kernels round: a step at cosine
# 0.99999 here measured 0.9895 on CI's CPU.
MIN_COSINE = 0.95
NORM_RATIO = (0.5, 2.0)


def trains_like_float32(cosine: float, norm_ratio: float) -> bool:
    """Whether a weight update agrees with the float32 step's (cosine of the two, ratio of their norms)."""
    return cosine > MIN_COSINE and NORM_RATIO[0] <= norm_ratio <= NORM_RATIO[1]


@dataclass
class StepComparison:
    """What one training step of a fixed file did against the float32 step (trace/child/step_check.py)."""

    agrees: bool = False
    problem: str | None = None  # the fix must not be applied
    unchecked: str | None = None  # why nothing is claimed either way

    @classmethod
    def of(cls, function: str | None, record, why_not: str | None) -> StepComparison:
        if function is None:
            return cls(unchecked=why_not)
        if record is None:
            return cls(unchecked=f"the training step `{function}` was not run")
        if record.skipped:
            return cls(unchecked=f"`{function}`: {record.skipped}")
        ratio, cosine = record.norm_ratio or 0.0, record.cosine or 0.0
        if ratio == 0.0:
            return cls(problem="the fixed step does not move the weights; the float32 step does")
        if not NORM_RATIO[0] <= ratio <= NORM_RATIO[1]:
            return cls(problem=f"the fixed step updates weights {_times(ratio)}x the float32 step")
        if cosine <= MIN_COSINE:
            return cls(
                problem=f"the fixed step moves the weights another way than the float32 step (cosine {cosine:.2f})"
            )
        return cls(agrees=True)


def _times(ratio: float) -> str:
    """3.1e-05 -> 3.1e-5 (small and large ratios in scientific notation); 0.31 -> 0.31."""
    text = f"{ratio:.1e}" if ratio < 0.01 or ratio >= 100 else f"{ratio:.2g}"
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + ("-" if m.group(1) == "-" else "") + m.group(2), text)


def step_function(fixed: str, training: list[tuple[Diagnostic, str]]) -> tuple[str | None, str | None]:
    """(the step to run for the training fixes in `fixed`, or None and why there is none): the module-level function
    holding them, or `Class.method` for a method of a module-level class (the trace child calls it on the class's one
    module-level instance). Fixes spread over several functions (or methods of one class) are checked through the
    one of them that calls the others, as a step calling its helper."""
    tree = parsed(fixed)
    if tree is None:
        return None, "the fixed file does not parse"
    units = step_units(tree)
    names: list[str] = []
    for d, text in training:
        mapped = line_mapper(text, fixed)
        # Where the finding is, else where its edits are (a fix reported at the optimizer may edit the step).
        lines = [mapped(line).start for line in (d.location.line, *(e.line for e in d.fix.edits))]
        owner = next((name for line in lines for name, (_, span) in units.items() if line in span), None)
        if owner is None:
            return None, "the fixed training code is not in a module-level function or a method of a module-level class"
        if owner not in names:
            names.append(owner)
    classes = {name.rpartition(".")[0] for name in names}
    if len(classes) != 1:
        return None, "the training fixes are in more than one function"
    roots = [n for n in names if not any(_calls(units[other][0], n) for other in names if other != n)]
    if len(roots) != 1:
        return None, "the training fixes are in more than one function"
    name = roots[0]
    why_not = not_a_step(name, units[name][0])
    if why_not is not None:
        return None, why_not
    return name, None


def _calls(caller: ast.AST, name: str) -> bool:
    """Whether `caller` names the function `name` (`helper(...)`) or the method (`self.helper(...)`)."""
    short = name.rpartition(".")[2]
    for node in ast.walk(caller):
        if "." in name and isinstance(node, ast.Attribute) and node.attr == short:
            return True
        if "." not in name and isinstance(node, ast.Name) and node.id == short:
            return True
    return False


def changes_training(d: Diagnostic) -> bool:
    return bool(d.fix and d.fix.changes_training)
