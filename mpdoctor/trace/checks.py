"""Run the trace child for one file and turn its facts into diagnostics (parent side, no TensorFlow).

Every rule's trace check runs on the facts; then MP001 is raised for a failed child, or for an exception of the run
that no rule explains: a rule explains it when its exception pattern reads the message and the rule reported
something, or when its own `explains_exception` hook says so (mpdoctor.registry).

When mpdoctor itself failed in the child (`facts.tool_failure`: its hooks do not fit this TensorFlow/Keras, or one
of them raised), the facts are incomplete: no trace check runs and no static finding is confirmed or withdrawn;
the one trace finding is MP001 at info severity, "mpdoctor cannot trace on TensorFlow X / Keras Y: <reason>".
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable
from dataclasses import replace

from mpdoctor.config import Config
from mpdoctor.crash_causes import caused_by_static
from mpdoctor.diagnostics import Diagnostic
from mpdoctor.facts.schema import ExceptionRecord, Facts, TraceSummary
from mpdoctor.notebook import NotebookError, is_notebook, read_notebook
from mpdoctor.project.layout import ImportLayout, is_installed, is_own_module, layout_of, unbuilt_extension
from mpdoctor.registry import hooks, verdict_of
from mpdoctor.sources import read_source
from mpdoctor.static.policy_context import PolicyContext
from mpdoctor.static.semantic import Settings
from mpdoctor.static.training_steps import training_steps
from mpdoctor.tf_messages import exception_summary
from mpdoctor.trace.broken_dependencies import (
    BrokenImport,
    crashed_dependency,
    failed_dependency,
    import_line,
    installed_distribution,
)
from mpdoctor.trace.failures import (
    broken_dependency,
    cannot_trace,
    failed_elsewhere,
    internal_error,
    main_run_failed,
    mark_stand_ins,
    native_crash,
    needs_arguments,
    not_built,
    not_installed,
    stand_in_failure,
    stand_ins_note,
    trace_failed,
    trace_timed_out,
    unexplained_exception,
)
from mpdoctor.trace.runner import run_trace, start_server
from mpdoctor.trace_context import TraceContext

StaticOf = Callable[[str], list[Diagnostic]]  # a file's path -> its static findings (mpdoctor.engine)


def trace_diagnostics(
    path: str,
    shown: str,
    text: str,
    tree: ast.Module,
    config: Config,
    settings: Settings,
    options,
    summaries: list | None = None,
    run_from: str | None = None,
    context: PolicyContext | None = None,
    static_of: StaticOf | None = None,
) -> tuple[list[Diagnostic], dict | None]:
    """Trace diagnostics, and the trace's verdicts on static findings (mpdoctor.engine.static_after_trace; None:
    mpdoctor could not trace, the trace rules did not run).
    `run_from`: a file holding `text` (a candidate fix) that the child runs as if it were `path`. `context`: the
    project's policy context this module is run under (its policy is set before the module is imported).
    `static_of`: the static findings of another file of the project (where a failure of the run may be reported)."""
    ctx = TraceContext(path, shown, text, tree, settings)
    outcome = run_trace(
        path,
        env=child_environment(settings.target, config.keras_backend),
        entry=options.entry,
        timeout=options.timeout,
        checkpoints=options.checkpoints,
        source=text if is_notebook(path) else None,
        run_from=run_from,
        numerics=getattr(options, "numerics", None),
        memory_limit_mb=options.memory_limit_mb,
        # The project's entry point's policy when one reaches this module, else --assume-policy's.
        policy=context.policy if context is not None else config.assume_policy,
        search_path=_search_path(context),
        plan=getattr(options, "plan", None),
        step_check=getattr(options, "step_check", None),
        layout=_import_layout(path),
        stub_missing=config.stub_missing,
        training_steps=tuple(training_steps(ctx.static)) if ctx.static is not None else (),
    )
    facts = outcome.facts
    failure = outcome.failure or _changed_during_trace(run_from or path, text)
    if summaries is not None:
        exception = facts.exception if facts is not None else None
        summary = exception_summary(exception.type, exception.message, exception.phase) if exception else None
        summaries.append(TraceSummary.of(shown, facts, failure, summary))
    return (
        diagnose(
            facts,
            failure,
            outcome.output_tail,
            ctx,
            config,
            timeout=options.timeout,
            static_of=static_of,
            crash_stack=outcome.crash_stack,
        ),
        verdicts(facts, ctx, config),
    )


def start_server_for(path: str, target, context: PolicyContext | None = None, keras_backend: str | None = None) -> None:
    """Start, without waiting, the fork server the trace of `path` (under `target`, `context` and the configured
    Keras backend, as `trace_diagnostics` will run it) is forked from."""
    start_server(path, env=child_environment(target, keras_backend), search_path=_search_path(context))


def _search_path(context: PolicyContext | None) -> tuple[str, ...]:
    """The entry point's directory, where imports are found from when the project's entry point runs the module."""
    return (os.path.dirname(context.entry),) if context is not None and context.entry else ()


def child_environment(target, keras_backend: str | None = None) -> dict | None:
    """The trace runs on the Keras backend chosen (KERAS_BACKEND, else `keras_backend` configured, else keras.json:
    mpdoctor.facts.keras_backends), always named to the child, so its fork server and the cache are per backend.
    On TensorFlow it runs under the file's target where it can: a `tf.keras` file whose target is Keras 2 runs with
    TF_USE_LEGACY_KERAS=1 when tf_keras is installed (tf.keras is then tf_keras), one whose target is Keras 3 with it
    off. None: the caller's environment unchanged (no TensorFlow >= 2.16 installed, so nothing to switch; a target
    that allows both; a file that imports tf_keras or keras itself, whose Keras the variable does not change)."""
    import os

    from mpdoctor.facts.keras_backends import BACKEND_ENV
    from mpdoctor.trace.backend_choice import chosen_backend

    choice = chosen_backend(keras_backend)
    environment = _tensorflow_environment(target)
    if choice.origin is None or choice.origin == BACKEND_ENV:
        return environment
    return dict(os.environ if environment is None else environment, **{BACKEND_ENV: choice.name})


def _tensorflow_environment(target) -> dict | None:
    import os

    from mpdoctor.facts.keras_semantics import LEGACY_KERAS_ENV
    from mpdoctor.facts.tf_releases import FIRST_KERAS3
    from mpdoctor.project import environment

    installed = environment.tensorflow_version()
    if target is None or installed is None or installed < FIRST_KERAS3 or not target.keras_certain:
        return None
    if target.flavour != "tf.keras":
        return None
    if target.keras_major == 2 and environment.tf_keras_installed():
        return dict(os.environ, **{LEGACY_KERAS_ENV: "1"})
    if target.keras_major == 3:
        return dict(os.environ, **{LEGACY_KERAS_ENV: "0"})
    return None


def verdicts(facts: Facts | None, ctx: TraceContext, config: Config) -> dict | None:
    """What the trace says about the static findings of the enabled rules; None when mpdoctor could not trace
    (`facts.tool_failure`): incomplete facts neither confirm nor withdraw anything, and no trace rule ran."""
    if facts is not None and facts.tool_failure is not None:
        return None
    found: dict = {}
    for hook in hooks("verdicts"):
        if facts is not None and any(config.enabled(code, ctx.display_path) for code in hook.codes):
            found.update(hook.fn(facts, ctx))
    if facts is not None and (facts.stopped or facts.stand_ins):
        # What did not run yet proves nothing, nor does a run on stand-ins' values: only confirmations stand.
        found = {key: verdict for key, verdict in found.items() if verdict is not None and verdict[0] == "confirm"}
    if facts is not None and facts.stand_ins:
        note = stand_ins_note(facts.stand_ins)
        found = {key: (verdict[0], f"{verdict[1]} ({note})") for key, verdict in found.items()}
    return found


def _changed_during_trace(path: str, text: str) -> str | None:
    """The model code deleted or rewrote its own file: the findings describe the text read before the run."""
    from pathlib import Path

    try:
        now = read_notebook(Path(path)).source if is_notebook(path) else read_source(Path(path))
    except OSError:
        return "the model code deleted or moved this file while it ran (findings refer to the text read before)"
    except (UnicodeDecodeError, SyntaxError, NotebookError):
        now = None
    if now != text:
        return "the model code rewrote this file while it ran (findings refer to the text read before)"
    return None


def diagnose(
    facts: Facts | None,
    failure: str | None,
    output_tail: str,
    ctx: TraceContext,
    config: Config,
    timeout: float | None = None,
    static_of: StaticOf | None = None,
    crash_stack: str = "",
) -> list[Diagnostic]:
    """Diagnostics from one trace: every trace check, then MP001 for a failed child or an unexplained exception.
    A failure of the one forward pass on mpdoctor's own synthetic batch (index ranges, strings, ragged inputs) may
    be the batch's fault, not the model's: rules that recognise it report it, it is never MP001. A child stopped
    at the timeout (`facts.timeout`) gets the checks on what it gathered, and the MP001 says where time ran out.
    `crash_stack`: where a fatal signal killed the child (faulthandler's dump)."""
    if facts is None:
        return [_child_died(ctx, config, failure or "the trace child reported nothing", output_tail, crash_stack)]
    if facts.tool_failure is not None and not failure:
        return [cannot_trace(ctx, facts)]
    found = run_checks(facts, ctx, config)
    if facts.stopped:
        found.append(trace_timed_out(ctx, facts, timeout))
    elif failure:
        found.append(trace_failed(ctx, failure, output_tail))
    if facts.stand_ins:
        found = [mark_stand_ins(d, facts.stand_ins) for d in found]
    exception = facts.exception
    if exception and exception.phase != "call" and not _explained(exception, facts, found):
        found.append(_exception_finding(exception, facts, ctx, config, static_of))
    return found


def _child_died(ctx: TraceContext, config: Config, failure: str, output_tail: str, crash_stack: str) -> Diagnostic:
    """The child left no facts. Killed by a fatal signal while a third-party library was being imported (torch's
    native code crashing next to TensorFlow): the environment's (an info, unless --strict-imports); else MP001."""
    crashed = None if config.strict_imports or not crash_stack else crashed_dependency(crash_stack, ctx.path)
    if crashed is None:
        return trace_failed(ctx, failure, output_tail)
    library, line = crashed
    imported_by = library.dependency if library.failed_in else None
    line = line or import_line(ctx.tree, library.dependency)  # the project's frames cut from the dump
    return native_crash(ctx, failure, library.failed_in or library.dependency, imported_by, line)


def _exception_finding(
    exception: ExceptionRecord, facts: Facts, ctx: TraceContext, config: Config, static_of: StaticOf | None
) -> Diagnostic:
    """The run's exception that no finding of this file explains: a missing third-party module, or one failing its
    own import with the packages installed here, is the environment's (an info, unless --strict-imports); a
    failure in another module of the project that a finding there explains is reported there (an info here,
    pointing at it); a failure after stand-ins were given may be theirs (--stub-missing); else MP001."""
    arguments = facts.entry_run.needs_arguments if facts.entry_run else []
    if arguments:
        return needs_arguments(ctx, exception, arguments)
    missing = None if config.strict_imports else missing_third_party(exception, ctx.path)
    if missing:
        return not_installed(ctx, exception, missing)
    extension = None if config.strict_imports else _unbuilt_extension(exception, ctx.path)
    if extension:
        return not_built(ctx, exception, *extension)
    broken = None if config.strict_imports else failed_dependency(exception.traceback or "", ctx.path)
    if broken:
        return broken_dependency(ctx, exception, broken.dependency, *_versions(broken))
    cause = cause_elsewhere(exception, ctx, static_of) if static_of is not None else None
    if cause is not None:
        return failed_elsewhere(ctx, exception, cause)
    if exception.phase == "main":
        return main_run_failed(ctx, exception, len(facts.models))
    if not facts.stand_ins:
        return unexplained_exception(ctx, exception)
    stood_in = stand_in_failure(ctx, exception, facts.stand_ins)
    return stood_in or mark_stand_ins(unexplained_exception(ctx, exception), facts.stand_ins)


def _versions(broken: BrokenImport) -> tuple[str | None, str | None]:
    """The failing dependency's installed distribution, and the one it failed in (its name when not known)."""
    under = broken.failed_in and (installed_distribution(broken.failed_in) or broken.failed_in)
    return installed_distribution(broken.dependency), under


_FRAME = re.compile(r'^  File "([^"]+)", line (\d+)', re.MULTILINE)


def cause_elsewhere(exception: ExceptionRecord, ctx: TraceContext, static_of: StaticOf) -> Diagnostic | None:
    """The finding of another module of the project that explains the run's failure (one finding per root cause):
    the deepest frame of the traceback in the project's code is in that module, and a finding of its static pass
    absorbs the crash there (mpdoctor.crash_causes: MP103's removed API failing to import, say)."""
    frame = _deepest_project_frame(exception.traceback or "", ctx.path)
    if frame is None:
        return None
    file, line = frame
    findings = static_of(file)
    if not findings:
        return None
    crash = unexplained_exception(ctx, exception)
    crash = replace(crash, location=replace(crash.location, path=findings[0].location.path, line=line))
    for finding in sorted(findings, key=lambda f: f.location.line != line):  # the failing line's own first
        if caused_by_static(crash, [finding]):
            return finding
    return None


def _deepest_project_frame(traceback: str, path: str) -> tuple[str, int] | None:
    """(file, line) of the traceback's deepest frame in a file of the project other than `path`; None when that
    frame is in `path` itself (its own findings explain it or not) or no frame is the project's."""
    root = layout_of(path).root if not is_notebook(path) else None
    project = (root or os.path.dirname(path)) + os.sep
    deepest = None
    for match in _FRAME.finditer(traceback):
        file = os.path.realpath(match.group(1))
        if file.startswith(project) and "site-packages" not in file and "dist-packages" not in file:
            deepest = (file, int(match.group(2)))
    if deepest is None or deepest[0] == os.path.realpath(path) or not deepest[0].endswith(".py"):
        return None
    return deepest


_NO_MODULE = re.compile(r"No module named '([\w.]+)'")


def missing_third_party(exception: ExceptionRecord, path: str) -> str | None:
    """The top-level module a ModuleNotFoundError of the run names when it is neither installed here nor the
    project's own (mpdoctor.project.layout): the environment lacks a dependency; a missing module of the project
    itself is a real bug, and a missing submodule of an installed package a version question (MP003, MP001)."""
    missing = _missing_module(exception)
    if missing is None:
        return None
    top = missing.split(".")[0]
    if is_installed(top) or is_own_module(top, layout_of(path), path):
        return None
    return top


def _unbuilt_extension(exception: ExceptionRecord, path: str) -> tuple[str, str] | None:
    """(module, its .pyx source) when the run stopped on a module of the project that exists only as Cython source."""
    missing = _missing_module(exception)
    source = unbuilt_extension(missing, layout_of(path), path) if missing else None
    return (missing, source) if missing and source else None


def _missing_module(exception: ExceptionRecord) -> str | None:
    """The dotted module a ModuleNotFoundError of the run names."""
    match = _NO_MODULE.search(exception.message) if exception.type == "ModuleNotFoundError" else None
    return match.group(1) if match else None


def run_checks(facts: Facts, ctx: TraceContext, config: Config) -> list[Diagnostic]:
    found: list[Diagnostic] = []
    for hook in hooks("trace"):
        if not any(config.enabled(code, ctx.display_path) for code in hook.codes):
            continue
        try:
            found.extend(hook.fn(facts, ctx))
        except Exception as exc:  # a bug in one trace rule must not hide the others
            found.append(internal_error(ctx, hook.fn.__name__, exc))
    return found


def _explained(exception: ExceptionRecord, facts: Facts, found: list[Diagnostic]) -> bool:
    """Whether a reported finding explains the run's exception."""
    verdict = verdict_of(exception)
    if verdict and any(d.code == verdict.code for d in found):
        return True
    return any(hook.fn(exception, facts, found) for hook in hooks("explains"))


def _import_layout(path: str) -> ImportLayout:
    """How the project imports the file. A notebook is run from its source, never imported by a dotted name, but
    its kernel sees the project as a script does (started in the project, or after `pip install -e .`): a notebook
    under examples/ imports the project's package (issue 31: segmentation_models, keras_unet, bert)."""
    layout = layout_of(path)
    return replace(layout, module=None) if is_notebook(path) else layout
