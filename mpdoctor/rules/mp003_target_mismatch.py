"""MP003 target-mismatch: the TensorFlow/Keras target resolved for a file disagrees with itself or with the run."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic, Location
from mpdoctor.facts.tf_releases import release_text, removal_of
from mpdoctor.registry import (
    define_rule,
    explains_exception,
    get_rule,
    raised_by_engine,
    static_check,
    trace_check,
)
from mpdoctor.static.context import StaticContext
from mpdoctor.static.names import canonical
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import ExceptionRecord, Facts

define_rule(
    "MP003",
    "target-mismatch",
    "info",
    "ST",
    False,
    summary="The TensorFlow/Keras target disagrees with itself or with the run (a pin vs the code, a trace on "
    "another TensorFlow).",
    what="""
        Every file is judged against one target: a TensorFlow range and a Keras major, resolved from the
        configuration (`--target-tensorflow`, `--keras-version`), the project's declared dependencies
        (pyproject.toml, requirements*.txt, setup.cfg/setup.py, Pipfile, environment.yml, a Dockerfile's
        TensorFlow image), the file's own code, and last the installed environment (`mpdoctor check --show-target
        FILE` prints it). MP003 reports where that target disagrees:
        - static: a dependency pin says one Keras and the file's own code another (a pin to TensorFlow < 2.16 but
          `keras.ops`, which exists only in Keras 3: the code wins and is judged as Keras 3), or the file uses
          TensorFlow 1 APIs (`tf.contrib`, `tf.Session`) under a TensorFlow 2 pin; or the project's files declare
          TensorFlow releases with none in common (requirements.txt `tensorflow==2.5.1`, a Dockerfile on a
          TensorFlow 1.15 image): the file is judged against the declaration nearest it; or, with nothing declared, the
          file looks written for another Keras than the installed one (`get_scaled_loss` where tf.keras is
          Keras 3): an API a rule reports is never taken as evidence for the target that would silence the
          rule, so the file is judged against the installed environment (MP103 reports the API) and one note
          says how to declare the target it was written for;
        - trace: the run failed on an API that the installed TensorFlow lacks but the target has (a TF 1.x or
          TF 2.8 target traced on TF 2.21), on a TensorFlow internal this build lacks (`tensorflow.python.ipu`),
          or on TF 1 graph code (`tf.placeholder()`) that TF 2 runs eagerly under a target allowing TF 1:
          "cannot trace", at info, instead of an MP001 error in your code;
        - trace: the file imports a module that is not installed where mpdoctor runs and is not the project's own
          (`wandb`, `pandas`): "not traced", at info, the static findings only (`--strict-imports` makes it the
          MP001 error it was); with `--stub-missing`, a run on stand-ins for such modules that then fails is "not
          traced to the end", at info (their placeholder values may be what failed);
        - trace: a third-party dependency fails while importing itself with the packages installed here (imgaug
          under NumPy 2), or the trace child is killed by a signal while a native library is being imported
          (torch next to TensorFlow): "not traced", at info (`--strict-imports`: the MP001 error).
        Trace findings observed on an installed TensorFlow outside the target say so in their message
        ("observed on TensorFlow 2.21; target ...").
        """,
    why="""
        Version-dependent rules (removed APIs, Keras 3 only behaviour) are right only for the version the code
        runs on. When the project's files and its code disagree, one of them is stale, and the findings follow the
        code; when the trace runs on another TensorFlow than the target, a missing API is the version gap, not a
        bug of the code.
        """,
    bad="""
        # requirements.txt: tensorflow>=2.12,<2.16
        import tensorflow as tf
        from tensorflow import keras
        y = keras.ops.softmax(x)        # keras.ops exists only in Keras 3
        """,
    good="""
        # requirements.txt: tensorflow>=2.16
        import tensorflow as tf
        from tensorflow import keras
        y = keras.ops.softmax(x)
        """,
    fix="No autofix: update the stale pin (or the code), or set the target explicitly with --target-tensorflow / "
    "--keras-version or [tool.mpdoctor] target-tensorflow / keras-version.",
)
# The trace's "not traced" findings for the environment (a third-party module not installed): mpdoctor.trace.failures
raised_by_engine("cannot_trace", "MP003")

# Only code that can name a Keras-3-only or TensorFlow-1-only API can disagree with a pin, and only a flagged
# Keras 2 / TensorFlow 1 API (mpdoctor.project.evidence) says the file looks written for another target.
_CONFLICT_TEXT = (
    r"\bops\b|set_dtype_policy|DTypePolicy|dtype_policies|TFSMLayer|SeedGenerator|scale_loss|contrib|Session|"
    r"placeholder|get_variable|variable_scope|global_variables_initializer|Optimizer|get_unscaled_gradients|"
    r"experimental"
)


@static_check("MP003", requires=_CONFLICT_TEXT)
def check_target_conflicts(ctx: StaticContext) -> Iterable[Diagnostic]:
    for conflict in ctx.target.conflicts:
        if conflict.declared:
            continue  # check_declaration_conflicts
        node = _statement_at(ctx, conflict.line)
        if node is None:
            yield Diagnostic("MP003", conflict.message, Location(ctx.display_path), get_rule("MP003").severity)
        else:
            yield ctx.diagnostic("MP003", node, conflict.message, confidence=Confidence.MEDIUM)


@static_check("MP003")
def check_declaration_conflicts(ctx: StaticContext) -> Iterable[Diagnostic]:
    """Project files that declare two TensorFlow lines: said once per file the target matters to (one that spells
    float16 or bfloat16), whatever its code."""
    for conflict in ctx.target.conflicts:
        if conflict.declared:
            yield Diagnostic("MP003", conflict.message, Location(ctx.display_path), get_rule("MP003").severity)


def _statement_at(ctx: StaticContext, line: int | None) -> ast.AST | None:
    """The first statement starting on `line` (where the clue is)."""
    if not line:
        return None
    return next((n for n in ctx.nodes if isinstance(n, ast.stmt) and n.lineno == line), None)


# ------------------------------------------------------------------------------------------------ the trace

_MISSING = (
    re.compile(r"No module named '([\w.]+)'"),
    re.compile(r"module '([\w.]+)' has no attribute '(\w+)'"),
    re.compile(r"cannot import name '(\w+)' from '([\w.]+)'"),
)
_MISSING_KINDS = ("ImportError", "ModuleNotFoundError", "AttributeError")
_OURS = ("tf", "keras", "hub")


def missing_api(exception: ExceptionRecord | None) -> str | None:
    """The TensorFlow/Keras API an ImportError / AttributeError of the run says is missing, canonical
    (`tf.contrib`, `keras.mixed_precision.experimental`), else None."""
    if exception is None or exception.type not in _MISSING_KINDS:
        return None
    for pattern in _MISSING:
        match = pattern.search(exception.message)
        if not match:
            continue
        if pattern is _MISSING[0]:
            dotted = match.group(1)
        elif pattern is _MISSING[1]:
            dotted = f"{match.group(1)}.{match.group(2)}"
        else:
            dotted = f"{match.group(2)}.{match.group(1)}"
        dotted = re.sub(r"\._api\.v[12]|\.api\._v[12]\.keras", "", dotted)  # tf_keras.api._v2.keras: tf_keras
        name = canonical(dotted)
        return name if name.split(".")[0] in _OURS else None
    return None


def version_gap(facts: Facts, ctx: TraceContext) -> str | None:
    """The missing API when the run failed on the gap between the installed TensorFlow and the target: the
    installed release is outside the target range and the API is not known to be missing from every target
    release (then the code is wrong on its own target: MP103 / MP001 say so); or a TensorFlow internal
    (`tensorflow.python.ipu`) that this build lacks, which differs between builds and versions."""
    target = ctx.target
    name = missing_api(facts.exception)
    if target is None or target.installed is None or name is None:
        return None
    if name.startswith(_INTERNALS):
        return name
    if target.installed_in_range:
        return None
    removal = removal_of(name)
    if removal is not None and removal.verdict(target.releases) == "all":
        return None
    return name


_INTERNALS = "tf.python."
_EAGER = re.compile(r"(\S+)\(\) is not compatible with eager execution")


def eager_gap(facts: Facts, ctx: TraceContext) -> str | None:
    """The TF1 graph API (`tf.placeholder()`) that raised because the installed TensorFlow 2 runs eagerly, when
    the target allows TensorFlow 1, where graph mode is the default; on a TensorFlow 2 target the code is wrong."""
    exception, target = facts.exception, ctx.target
    if exception is None or target is None or target.installed is None or target.installed[0] < 2:
        return None
    match = _EAGER.search(exception.message)
    if match is None or not any(release[0] < 2 for release in target.releases):
        return None
    return match.group(1)


@trace_check("MP003")
def trace_cannot_trace(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    target = ctx.target
    exception = facts.exception
    if target is None or target.installed is None or exception is None:
        return []
    name = version_gap(facts, ctx)
    if name is not None:
        why = (
            "a TensorFlow internal that differs between builds and versions"
            if name.startswith(_INTERNALS)
            else f"and this file targets {target.summary()}"
        )
        # tf_keras is what the trace runs tf.keras as for a Keras 2 target: say so, the user's Keras may differ.
        under = " on tf_keras" if "tf_keras" in exception.message and target.keras_major == 2 else ""
        message = f"lacks `{name}` ({exception.type}{under}), {why}"
    elif (api := eager_gap(facts, ctx)) is not None:
        message = (
            f"runs eagerly, and `{api}()` is TensorFlow 1 graph code (this file targets {target.summary()}; "
            "`tf.compat.v1.disable_eager_execution()` runs it on TensorFlow 2)"
        )
    else:
        return []
    return [
        ctx.diagnostic(
            "MP003",
            exception.location,
            f"cannot trace: the installed TensorFlow {release_text(target.installed)} {message}; the trace pass "
            "checked nothing here, the static findings are still reported",
            confidence=Confidence.MEDIUM,
            observed_note=False,
        )
    ]


@explains_exception("MP003")
def explained_by_version_gap(exception: ExceptionRecord, facts: Facts, found: list[Diagnostic]) -> bool:
    """The run's ImportError/AttributeError is the version gap MP003 reported, not an error of the code."""
    return any(d.code == "MP003" and d.message.startswith("cannot trace:") for d in found)
