"""`mpdoctor plan FILE`: the smallest set of layers to keep in float32 under a low-precision policy, found on a
sample batch by bisection and verified; --diff / --fix turn it into code (mpdoctor/plan.py)."""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence
from pathlib import Path

from mpdoctor.cli.exit_codes import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from mpdoctor.cli.pipeline import Exit, Output, Pipeline, fail
from mpdoctor.printable import escape_controls


def add_parser(sub) -> None:
    from mpdoctor.cli.check import positive_number
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
        type=positive_number(),
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


def run_plan(args) -> int:
    return PlanRun(args).execute()


def _fail(message: str) -> Exit:
    return fail(message)


class PlanRun(Pipeline):
    """`mpdoctor plan FILE`: the plan found on the traced model, --diff / --fix, then the plan report."""

    def validate(self) -> None:
        from mpdoctor.config import ConfigError, load_config
        from mpdoctor.reads import regular_file_problem
        from mpdoctor.trace.runner import backend_missing
        from mpdoctor.writes import refusal

        args = self.args
        path: Path = args.path
        for given in (path, args.sample, args.config):
            problem = regular_file_problem(given) if given else None
            if problem:
                raise _fail(f"{given}: {problem}")
        if path.suffix != ".py":
            raise _fail(f"{path}: plan takes a Python model file (.py)")
        for output in (args.output, args.html):  # refused before the trace, not after it
            problem = refusal(output, self.refused()) if output else None
            if problem:
                raise _fail(f"{output}: {self.write_failure}: {problem}")
        try:
            self.config = load_config(path, args.config)
        except ConfigError as exc:
            raise _fail(str(exc)) from None
        missing = backend_missing(self.config.keras_backend, needed_by="plan (it runs the model)")
        if missing is not None:
            raise _fail(missing)

    def options(self) -> None:
        from mpdoctor.engine import TraceOptions
        from mpdoctor.plan import plan_request

        args, config = self.args, self.config
        if args.sample is not None:
            config.numerics.sample = str(args.sample.resolve())
        config.numerics.enabled = True
        timeout = args.trace_timeout or config.trace_timeout
        if timeout <= 0:
            raise _fail("--trace-timeout must be positive")
        self.trace = TraceOptions(
            enabled=True,
            timeout=timeout,
            entry=args.entry or config.entry,
            numerics=config.numerics.request(),
            memory_limit_mb=config.trace_memory,
            plan=plan_request(args.policy, args.rtol),
        )

    def run(self) -> None:
        from mpdoctor.plan import make_plan

        self.result = make_plan(self.args.path, self.config, self.trace)
        if self.result.report.errors:
            for error in self.result.report.errors:
                print(escape_controls(error.render()), file=sys.stderr)
            raise Exit(EXIT_ERROR)
        self.plans = self.result.plans()
        if self.args.fix or self.args.diff:
            self._change_the_file()

    def _change_the_file(self) -> None:
        """--diff / --fix: the plan as edits, verified by re-tracing; --fix writes them, --diff prints them."""
        from mpdoctor.plan import plan_edits, verify_plan
        from mpdoctor.sources import read_source

        args, path = self.args, self.args.path
        text = read_source(path)
        self.result.fix = fix = plan_edits(self.result, path, text)
        if fix.changed and not fix.error:
            policy = args.policy or next((p.policy for _, p in self.plans if p.policy), None)
            verify_plan(fix, path, self.config, self.trace, policy, args.rtol)
        if args.fix and fix.changed and fix.verified:
            _write_fix(fix, path, text)
        if args.diff and fix.verified:
            sys.stdout.write(fix.diff())

    def render(self) -> list[Output]:
        """The plan report for -o's file, else on stdout (on stderr with --diff: stdout holds the diff); the HTML
        report for --html."""
        from mpdoctor.report.plan import render_json, render_text

        args = self.args
        stream = io.StringIO()
        (render_json if args.format == "json" else render_text)(self.result, stream)
        outputs = []
        if args.output:
            outputs.append(Output(args.output, stream.getvalue()))
        else:
            (sys.stderr if args.diff else sys.stdout).write(stream.getvalue())
        if args.html:
            from mpdoctor.report import write_report

            html = io.StringIO()
            write_report(self.result.report, "html", html)
            outputs.append(Output(args.html, html.getvalue()))
        return outputs

    def refused(self) -> Sequence[Path]:
        return [self.args.path]  # never over the model file (a forgotten argument)

    def exit_code(self) -> int:
        plans = self.plans
        trace_summary = self.result.trace
        if trace_summary is not None and trace_summary.failure and not plans:
            return EXIT_ERROR
        if self.result.fix is not None and self.result.fix.written:
            return EXIT_OK
        if self.result.constant_fixes:
            return EXIT_FINDINGS  # the constant fixes the plan takes are still to be applied
        ok = plans and all(
            not p.skipped and p.final is not None and p.final.passed and not p.layers and not p.gradient_advice
            for _, p in plans
        )
        return EXIT_OK if ok else EXIT_FINDINGS


def _write_fix(fix, path: Path, analysed: str) -> None:
    """Write the verified plan into the model file, if it still holds the text the plan was made from; why not in
    fix.error."""
    from mpdoctor.fix.writing import write_fixed

    error = write_fixed(path, analysed, fix.fixed, str(path))
    if error is None:
        fix.written = True
    else:
        fix.error = error
