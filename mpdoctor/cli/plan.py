"""`mpdoctor plan FILE`: the smallest set of layers to keep in float32 under a low-precision policy, found on a
sample batch by bisection and verified; --diff / --fix turn it into code (mpdoctor/plan.py)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from mpdoctor.cli.exit_codes import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK


def add_parser(sub) -> None:
    from mpdoctor.cli.check import _positive_number as positive_number
    from mpdoctor.facts.dtypes import PLAN_POLICIES

    plan = sub.add_parser(
        "plan",
        help="find the smallest set of layers to keep in float32 (traced, verified)",
        description="Trace the model file like `check`, run its sample batch under the policy and in float32, and "
        "find by bisection the smallest set of layers that must compute in float32 for finite outputs within "
        "--rtol of float32; for a file that trains the model, one training step's gradients too. Exit 0: nothing "
        "to keep in float32 (or --fix applied and verified); 1: layers to keep in float32, gradients that need "
        "loss scaling, or no verified plan; 2: error.",
    )
    plan.add_argument("path", type=Path, metavar="FILE", help="the model file (.py)")
    plan.add_argument(
        "--policy", choices=PLAN_POLICIES, help="the low-precision policy to plan for (default: the file's own)"
    )
    plan.add_argument("--sample", type=Path, metavar="FILE.npz", help="the sample batch (arrays by input name)")
    plan.add_argument(
        "--rtol",
        type=float,
        metavar="R",
        help="largest relative error max|y - y32| / max|y32| of the model outputs that passes (default: 0.01)",
    )
    plan.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    plan.add_argument("-o", "--output", type=Path, metavar="FILE", help="write the plan to FILE")
    plan.add_argument("--html", type=Path, metavar="FILE", help="also write the HTML report, float32 set highlighted")
    plan.add_argument("--entry", metavar="NAME", help="the function or module attribute that gives the model")
    plan.add_argument(
        "--trace-timeout", type=positive_number("seconds"), metavar="SECONDS", help="time limit for the model code"
    )
    plan.add_argument("--config", type=Path, metavar="FILE", help="read [tool.mpdoctor] from this pyproject.toml")
    change = plan.add_mutually_exclusive_group()
    change.add_argument("--diff", action="store_true", help="print the plan as a unified diff, write nothing")
    change.add_argument("--fix", action="store_true", help="write the plan into the file (verified by re-tracing)")
    plan.set_defaults(handler=run_plan)


def _error(message: str) -> int:
    print(f"mpdoctor: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def run_plan(args) -> int:
    from mpdoctor.config import ConfigError, load_config
    from mpdoctor.engine import TraceOptions
    from mpdoctor.plan import make_plan, plan_edits, plan_request, verify_plan
    from mpdoctor.reads import regular_file_problem
    from mpdoctor.trace.runner import tensorflow_available

    path: Path = args.path
    for given in (path, args.sample, args.config):
        problem = regular_file_problem(given) if given else None
        if problem:
            return _error(f"{given}: {problem}")
    if path.suffix != ".py":
        return _error(f"{path}: plan takes a Python model file (.py)")
    if args.rtol is not None and not args.rtol > 0:
        return _error("--rtol must be positive")
    if not tensorflow_available():
        return _error("plan runs the model: it needs TensorFlow in this environment (pip install 'mpdoctor[tf]')")
    try:
        config = load_config(path, args.config)
    except ConfigError as exc:
        return _error(str(exc))
    if args.sample is not None:
        config.numerics.sample = str(args.sample.resolve())
    config.numerics.enabled = True
    timeout = args.trace_timeout or config.trace_timeout
    if timeout <= 0:
        return _error("--trace-timeout must be positive")
    trace = TraceOptions(
        enabled=True,
        timeout=timeout,
        entry=args.entry or config.entry,
        numerics=config.numerics.request(),
        memory_limit_mb=config.trace_memory,
        plan=plan_request(args.policy, args.rtol),
    )
    result = make_plan(path, config, trace)
    if result.report.errors:
        for error in result.report.errors:
            print(error.render(), file=sys.stderr)
        return EXIT_ERROR
    plans = result.plans()
    if args.fix or args.diff:
        from mpdoctor.fix.writing import ReadOnly, StaleFile, write_atomic
        from mpdoctor.sources import read_source

        text = read_source(path)
        result.fix = fix = plan_edits(result, path, text)
        if fix.changed and not fix.error:
            policy = args.policy or next((p.policy for _, p in plans if p.policy), None)
            verify_plan(fix, path, config, trace, policy, args.rtol)
        if args.fix and fix.changed and fix.verified:
            try:
                write_atomic(path, text, fix.fixed)
                fix.written = True
            except (StaleFile, ReadOnly) as exc:
                fix.error = str(exc)
            except OSError as exc:
                fix.error = f"{path}: cannot write: {exc.strerror or exc}; the original is unchanged"
        if args.diff and fix.verified:
            sys.stdout.write(fix.diff())
    stream = io.StringIO()
    from mpdoctor.report.plan import render_json, render_text

    (render_json if args.format == "json" else render_text)(result, stream)
    written = []
    if args.output:
        written.append((args.output, stream.getvalue()))
    elif not args.diff or args.format == "json":
        (sys.stderr if args.diff else sys.stdout).write(stream.getvalue())
    else:
        sys.stderr.write(stream.getvalue())
    if args.html:
        from mpdoctor.report import write_report

        html = io.StringIO()
        write_report(result.report, "html", html)
        written.append((args.html, html.getvalue()))
    from mpdoctor.writes import write_atomic as write_output

    for target, content in written:
        try:
            write_output(target, content, refuse=[path])  # never over the model file (a forgotten argument)
        except OSError as exc:
            return _error(f"{target}: cannot write: {exc.strerror or exc}")
    trace_summary = result.trace
    if trace_summary is not None and trace_summary.failure and not plans:
        return EXIT_ERROR
    if result.fix is not None and result.fix.written:
        return EXIT_OK
    ok = plans and all(
        not p.skipped and p.final is not None and p.final.passed and not p.layers and not p.gradient_advice
        for _, p in plans
    )
    return EXIT_OK if ok else EXIT_FINDINGS
