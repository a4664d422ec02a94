"""`mpdoctor check`: the static and trace passes over files and directories, reports in every format, baselines,
and --fix / --diff."""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mpdoctor.cli.exit_codes import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from mpdoctor.cli.pipeline import Exit, Output, Pipeline, fail, write_outputs
from mpdoctor.printable import escape_controls

if TYPE_CHECKING:
    from collections import Counter

    from mpdoctor.cli.stdin import StdinSource
    from mpdoctor.config import Config
    from mpdoctor.diagnostics import Report

NO_CACHE_VARIABLE = "MPDOCTOR_NO_CACHE"  # as --no-cache (ruff's RUFF_NO_CACHE): test suites and one-off runs


def add_parser(sub) -> None:
    from mpdoctor.report import FORMATS

    check = sub.add_parser("check", help="check model files and directories")
    check.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="files or directories (default: .); `-`: the source on stdin",
    )
    check.add_argument(
        "--stdin-filename",
        type=Path,
        metavar="PATH",
        help="the path of the source read from stdin: reported as PATH, configured and targeted from there, traced "
        "only when PATH holds the same text; with --fix, the fixed source goes to stdout",
    )
    trace = check.add_mutually_exclusive_group()
    trace.add_argument("--no-trace", action="store_true", help="static pass only: never imports TensorFlow")
    trace.add_argument(
        "--trace", action="store_true", help="require the trace pass (default: run it when TensorFlow is installed)"
    )
    check.add_argument(
        "--trace-timeout",
        type=positive_number("seconds"),
        metavar="SECONDS",
        help="time limit for running one file's model code (default: 300)",
    )
    check.add_argument(
        "--trace-memory",
        type=positive_number("MiB"),
        metavar="MB",
        help="kill the model code when its resident memory exceeds MB MiB (default: no limit)",
    )
    check.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        metavar="PATH",
        help="trace: also range-audit this checkpoint for the model's float16 compute (repeatable)",
    )
    check.add_argument(
        "--numerics",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="trace: compare float16 and float32 layer by layer on a sample batch (default: on)",
    )
    check.add_argument(
        "--sample",
        type=Path,
        metavar="FILE.npz",
        help="trace: the sample batch for --numerics (arrays by input name, else in order)",
    )
    check.add_argument(
        "--entry",
        metavar="NAME",
        help="the function (called without arguments) or module attribute that gives the model",
    )
    check.add_argument("--select", metavar="CODES", help="comma-separated codes or prefixes to enable (e.g. MP2,MP401)")
    check.add_argument("--extend-select", metavar="CODES", help="codes or prefixes to enable in addition")
    check.add_argument("--ignore", metavar="CODES", help="codes or prefixes to disable")
    check.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    check.add_argument("-o", "--output", type=Path, metavar="FILE", help="write the report to FILE")
    check.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write the self-contained HTML report to FILE (whatever --format is)",
    )
    check.add_argument(
        "--fail-on",
        choices=("error", "warning", "info"),
        help="lowest severity that makes the exit code 1 (default: warning)",
    )
    check.add_argument("--exit-zero", action="store_true", help="exit 0 even when problems are found")
    baseline = check.add_mutually_exclusive_group()
    baseline.add_argument(
        "--baseline",
        type=Path,
        metavar="FILE",
        help="findings listed in FILE do not fail the run (only new ones are reported)",
    )
    baseline.add_argument(
        "--write-baseline",
        type=Path,
        metavar="FILE",
        help="record the current findings in FILE (for --baseline) and exit 0",
    )
    check.add_argument("--statistics", action="store_true", help="count findings per code")
    check.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    check.add_argument(
        "--keras-version",
        choices=("2", "3"),
        help="assume this Keras (default: from the file, TF_USE_LEGACY_KERAS and the installed TensorFlow)",
    )
    check.add_argument(
        "--target-tensorflow",
        metavar="SPEC",
        help='judge the code against this TensorFlow, e.g. ">=2.12,<2.16" or 2.15 (default: from the project\'s '
        "declared dependencies, the file, then the installed TensorFlow)",
    )
    check.add_argument(
        "--show-target",
        action="store_true",
        help="print the TensorFlow/Keras target resolved for each file and where it came from, then exit",
    )
    check.add_argument(
        "--strict-imports",
        action="store_true",
        default=None,
        help="a module the file imports that is not installed here fails the trace as an MP001 error (default: an "
        "MP003 info, `not traced`, static findings only)",
    )
    check.add_argument(
        "--stub-missing",
        action="store_true",
        default=None,
        help="trace with stand-ins for the missing modules that are not ML frameworks (pandas, wandb, tqdm...), so "
        "the model is still built; findings of such a run say so",
    )
    check.add_argument(
        "--assume-policy",
        metavar="POLICY",
        help="global dtype policy to assume when a file sets none (e.g. mixed_float16)",
    )
    check.add_argument(
        "-j",
        "--jobs",
        type=_positive_integer,
        metavar="N",
        help="check N files at once: N trace children, or the static pass alone in N worker processes (default: "
        "the number of usable cores; the output does not depend on it)",
    )
    check.add_argument(
        "--shard",
        type=_shard,
        metavar="I/N",
        help="check only part I of N (CI matrix jobs; combine their --format json reports with `mpdoctor merge`)",
    )
    cache = check.add_mutually_exclusive_group()
    cache.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="where the result cache lives (default: $MPDOCTOR_CACHE_DIR, [tool.mpdoctor] cache-dir, else "
        ".mpdoctor_cache in the project root)",
    )
    cache.add_argument(
        "--no-cache", action="store_true", help="check every file afresh: neither read nor write the result cache"
    )
    check.add_argument("--config", type=Path, metavar="FILE", help="read [tool.mpdoctor] from this pyproject.toml")
    check.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    check.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="say on stderr how the run went (the project analysis, where it fell back to file-by-file checks); "
        "text output: each finding's notes (why the trace confirmed it, mpdoctor's own errors)",
    )
    check.add_argument(
        "--show-contexts",
        action="store_true",
        help="print each model builder with the dtype policy contexts its project's entry points run it under, and "
        "how they were found; check nothing",
    )
    check.add_argument(
        "--fix", action="store_true", help="apply the safe fixes (verified by re-tracing when the trace pass runs)"
    )
    check.add_argument("--unsafe-fixes", action="store_true", help="with --fix/--diff: also the unsafe fixes")
    check.add_argument("--diff", action="store_true", help="print the fixes as unified diffs, write nothing")

    check.set_defaults(handler=run_check)


def _ascii_integer(text: str) -> int | None:
    """`text` as an integer when it is one in ASCII digits (str.isdigit() also accepts "²", which int() rejects;
    int() refuses more than 4,300 digits)."""
    try:
        return int(text) if text.isascii() and text.isdigit() else None
    except ValueError:
        return None


def _positive_integer(text: str) -> int:
    value = _ascii_integer(text)
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _shard(text: str) -> tuple[int, int]:
    first, _, second = text.partition("/")
    index, count = _ascii_integer(first), _ascii_integer(second)
    if index is None or count is None or not 1 <= index <= count:
        raise argparse.ArgumentTypeError(f"expected I/N with 1 <= I <= N, got {text!r}")
    return index, count


def positive_number(unit: str | None = None):
    """argparse type: a finite positive number (float() alone accepts nan, inf and negatives). Named for argparse,
    which names the type in the errors a type raises other than ArgumentTypeError."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            what = f"a positive number of {unit}" if unit else "a finite positive number"
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = "number"
    return parse


def _split(value: str | None) -> list[str] | None:
    return None if value is None else [v for v in value.replace(" ", ",").split(",") if v]


def _use_colour(choice: str, stream) -> bool:
    if choice == "always":
        return True
    if choice == "never":
        return False
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()


def run_check(args) -> int:
    return CheckRun(args).execute()


class CheckRun(Pipeline):
    """`mpdoctor check`: the passes over the paths, the baseline, --fix/--diff, then the report."""

    write_failure = "cannot write report"

    def validate(self) -> None:
        self.stdin = self._stdin()
        if self.stdin is not None:
            self.paths = [self.stdin.path or Path(".")]  # where its configuration is found
        else:
            self.paths = self.args.paths or [Path(".")]
        self.config = self._configuration()
        if self.args.show_target:
            raise Exit(_show_targets(self.paths, self.config))
        self.tracing = self._tracing()
        self._check_checkpoints()
        if self.args.sample is not None:
            from mpdoctor.reads import regular_file_problem

            problem = regular_file_problem(self.args.sample)
            if problem:
                raise fail(f"{self.args.sample}: {problem}")

    def _stdin(self) -> StdinSource | None:
        """The source read from stdin, when `-` (or --stdin-filename alone) asks for it."""
        from mpdoctor.cli.stdin import StdinError, read_stdin, wanted

        args = self.args
        try:
            if not wanted(args.paths, args.stdin_filename):
                return None
            for option, given in (("--show-target", args.show_target), ("--show-contexts", args.show_contexts)):
                if given:
                    raise StdinError(f"{option} reads files: not with `-` (stdin)")
            return read_stdin(args.stdin_filename)
        except StdinError as exc:
            raise fail(str(exc)) from None

    def _configuration(self) -> Config:
        from mpdoctor.config import ConfigError, apply_overrides, load_config

        args = self.args
        try:
            config = load_config(self.paths[0], args.config)
            apply_overrides(
                config,
                "command line",
                select=_split(args.select),
                extend_select=_split(args.extend_select),
                ignore=_split(args.ignore),
                fail_on=args.fail_on,
                keras_version=args.keras_version,
                target_tensorflow=args.target_tensorflow,
                assume_policy=args.assume_policy,
                strict_imports=args.strict_imports,
                stub_missing=args.stub_missing,
                trace_memory=args.trace_memory,
                jobs=args.jobs,
            )
        except ConfigError as exc:
            raise fail(str(exc)) from None
        return config

    def _tracing(self) -> bool:
        """Whether the trace pass runs: the trace runner is imported (and TensorFlow looked for) only by runs that
        may trace."""
        if self.args.no_trace:
            return False
        from mpdoctor.trace.runner import backend_missing

        missing = backend_missing(self.config.keras_backend)
        tracing = missing is None
        if self.args.trace and missing is not None:
            raise fail(f"{missing}; use --no-trace for the static pass alone")
        if self.stdin is not None and not self.stdin.on_disk:  # the trace runs a file: this text is in none
            if self.args.trace:
                raise fail("--trace of stdin needs --stdin-filename naming a file that holds the same text")
            return False
        return tracing

    def _check_checkpoints(self) -> None:
        checkpoints = self.args.checkpoint
        missing = [c for c in checkpoints if not (os.path.exists(c) or os.path.exists(c + ".index"))]
        if missing:
            raise fail(f"{missing[0]}: no such checkpoint")
        if checkpoints and not self.tracing:
            raise fail("--checkpoint needs the trace pass (TensorFlow installed, no --no-trace)")

    def options(self) -> None:
        from mpdoctor.engine import TraceOptions

        args, config = self.args, self.config
        if args.numerics is not None:
            config.numerics.enabled = args.numerics
        if args.sample is not None:
            config.numerics.sample = str(args.sample.resolve())
        self.trace = TraceOptions(
            enabled=self.tracing,
            timeout=args.trace_timeout or config.trace_timeout,
            entry=args.entry or config.entry,
            checkpoints=tuple(args.checkpoint),
            numerics=config.numerics.request(),
            memory_limit_mb=config.trace_memory,
            jobs=self._jobs(),
        )
        if args.show_contexts:
            raise Exit(show_contexts(self.paths, config, verbose=args.verbose))

    def _jobs(self) -> int:
        """--jobs (or the configuration's jobs), at most the usable cores: more would only fork a process per file
        (`-j 100000` on 300 files: 300 static workers on 2 cores) and make them contend. Said on stderr when -j asked
        for more (a configuration's value: with --verbose, as it may be shared by machines of any size)."""
        from mpdoctor.engine import usable_cores

        cores, asked = usable_cores(), self.config.jobs
        if asked is None or asked <= cores:
            return asked or cores
        if self.args.jobs is not None or self.args.verbose:
            origin = "-j" if self.args.jobs is not None else "jobs"
            core_count = f"{cores} usable core{'' if cores == 1 else 's'}"
            print(f"mpdoctor: note: {origin} {asked} is more than the {core_count}: using {cores}", file=sys.stderr)
        return cores

    def run(self) -> None:
        """The passes, then what the run does with their findings before the report: the baseline applied or
        written, notes and errors on stderr, --fix / --diff."""
        baseline = self._baseline()
        self._collect()
        self.report = self._check()
        if baseline is not None:
            from mpdoctor.baseline import split

            keys, file = baseline
            self.report.diagnostics, self.report.baselined = split(
                self.report.diagnostics, self.report.sources, keys, file.parent
            )
        self._write_baseline()
        self._print_notes()
        self._fix()

    def _baseline(self) -> tuple[Counter, Path] | None:
        """The keys of the baseline the findings are matched against, and its file; mpdoctor.baseline (hashing,
        atomic writes) is imported by the runs that use one only."""
        file = None if self.args.write_baseline else self.args.baseline or self.config.baseline
        if not file:
            return None
        from mpdoctor.baseline import BaselineError, load_baseline

        try:
            return load_baseline(file), file
        except BaselineError as exc:
            raise fail(str(exc)) from None

    def _collect(self) -> None:
        from mpdoctor.engine import collect_files

        if self.stdin is not None:  # nothing to walk; the file it stands for must not be replaced by a report
            path = self.stdin.path
            self.checked = [path] if path is not None and os.path.exists(path) else []
        else:
            self.collected = collect_files(self.paths, self.config)
            self.checked = self.collected[0]
        # A forgotten file argument (`--write-baseline keep.py`, `-o model.py`) must not replace a file being checked;
        # refused before the run, so no time is spent on a report that cannot be written.
        args = self.args
        for option, output in (("-o", args.output), ("--html", args.html), ("--write-baseline", args.write_baseline)):
            if output is not None and any(_same_file(output, path) for path in self.checked):
                raise fail(f"{output}: is one of the files being checked; not overwritten ({option})")

    def _check(self) -> Report:
        from mpdoctor.engine import check_paths
        from mpdoctor.progress import Progress

        args, config = self.args, self.config
        if self.stdin is not None:
            from mpdoctor.cli.stdin import check_stdin

            return check_stdin(self.stdin, config, self.trace)
        progress = Progress.for_stream(sys.stderr, self.tracing)
        report = check_paths(
            self.paths,
            config,
            self.trace,
            progress=progress,
            collected=self.collected,
            shard=args.shard,
            cache=_result_cache(args, config, self.trace),
            prerender=_prerender(args),
        )
        if progress is not None:
            progress.clear()
        return report

    def _write_baseline(self) -> None:
        file = self.args.write_baseline
        if not file:
            return
        from mpdoctor.baseline import BaselineError, write_baseline

        try:
            count = write_baseline(file, self.report.diagnostics, self.report.sources, refuse=self.checked)
        except BaselineError as exc:
            raise fail(str(exc)) from None
        message = f"mpdoctor: {file}: baseline of {count} finding{'' if count == 1 else 's'} written"
        print(escape_controls(message), file=sys.stderr)

    def _print_notes(self) -> None:
        for line in problem_lines(self.report, verbose=self.args.verbose):
            print(line, file=sys.stderr)

    def _fix(self) -> None:
        """--fix / --diff; --diff prints the diffs instead of the report and ends the run."""
        args = self.args
        if not (args.fix or args.diff):
            return
        from mpdoctor.fix.run import fix_report
        from mpdoctor.report.diff import write_diffs

        stdin = self.stdin if not args.diff else None  # --fix of stdin: the fixed source to stdout, for an editor
        fix_report(self.report, self.config, self.trace, unsafe=args.unsafe_fixes, write=not args.diff and not stdin)
        if stdin is not None:
            from mpdoctor.cli.stdin import write_fixed

            sys.stdout.flush()
            write_fixed(self.report, stdin, sys.stdout.buffer)
        if args.diff:
            count = write_diffs(self.report, sys.stdout, sys.stderr, unsafe=args.unsafe_fixes)
            raise Exit(EXIT_ERROR if self.report.errors else (EXIT_FINDINGS if count else EXIT_OK))

    def render(self) -> list[Output]:
        if self.stdin is not None and self.args.fix:  # stdout holds the fixed source: the report goes to stderr
            with contextlib.redirect_stdout(sys.stderr):
                return render_report(self.report, self.args)
        return render_report(self.report, self.args)

    def refused(self) -> Sequence[Path]:
        return self.checked

    def exit_code(self) -> int:
        return report_exit_code(self.report, self.args, self.config)


def problem_lines(report: Report, *, verbose: bool = False) -> list[str]:
    """What `check` says on stderr before its report (also the Jupyter magic's first lines): the files skipped,
    with --verbose how the run went, then each file that could not be checked (`broken.py:1:7: syntax error`)."""
    lines = [f"mpdoctor: note: {skipped.path}: skipped: {skipped.message}" for skipped in report.skipped]
    if verbose:
        lines += [f"mpdoctor: {note}" for note in report.notes]
    lines += [error.render() for error in report.errors]
    return [escape_controls(line) for line in lines]


def _prerender(args):
    """The JSON text of each finding, computed where it is found (in parallel), when the JSON report is the one
    output and what is found is what is written (--fix and --diff replace fixed findings)."""
    if args.format != "json" or args.html or args.fix or args.diff:
        return None
    from mpdoctor.report.json_format import prerender

    return prerender


def _result_cache(args, config, options):
    """The result cache when the trace runs (it caches the static and trace result of a file as one): a file's static
    pass alone costs about what reading its entry would. --fix is served from it too: an entry is keyed on the
    file's text, so its fixes are the ones a fresh run computes for that text, and fix_report re-traces each fixed
    text before writing it either way."""
    if args.no_cache or os.environ.get(NO_CACHE_VARIABLE, "") not in ("", "0") or not options.enabled:
        return None
    from mpdoctor.cache import ResultCache, cache_directory

    return ResultCache(cache_directory(args.cache_dir, config.cache_dir, config.root), config, options)


def deliver(report, args, config, refuse=()) -> int:
    """Write the report as --format/--output/--html ask (also for `mpdoctor merge`), and the exit code. `refuse`:
    files a report must never replace (those checked)."""
    try:
        write_outputs(render_report(report, args), refuse=refuse, failure=CheckRun.write_failure)
    except Exit as stop:
        return stop.code
    return report_exit_code(report, args, config)


def render_report(report, args) -> list[Output]:
    """The report in --format on stdout, or for -o's file; the HTML report for --html."""
    from mpdoctor.report import write_report
    from mpdoctor.report.counts import outcome

    buffer = io.StringIO() if args.output else None
    target = buffer if buffer is not None else sys.stdout
    write_report(
        report,
        args.format,
        target,
        colour=_use_colour(args.color, target) if buffer is None else False,
        statistics=args.statistics,
        quiet=args.quiet,
        verbose=getattr(args, "verbose", False),  # `mpdoctor merge` has no --verbose
    )
    summary = None if args.quiet else outcome(report)
    outputs = [Output(args.output, buffer.getvalue(), summary)] if buffer is not None else []
    if args.html:
        html = io.StringIO()
        write_report(report, "html", html)
        outputs.append(Output(args.html, html.getvalue(), summary))
    return outputs


def report_exit_code(report, args, config) -> int:
    """2 when a file could not be checked; else 1 when a finding is at or above --fail-on (not with --exit-zero or
    --write-baseline); else 0."""
    if report.errors:
        return EXIT_ERROR
    if args.exit_zero or getattr(args, "write_baseline", None):
        return EXIT_OK
    threshold = config.fail_on.rank
    failing = any(d.severity.rank >= threshold for d in report.diagnostics)
    return EXIT_FINDINGS if failing else EXIT_OK


def _show_targets(paths: list[Path], config) -> int:
    """`check --show-target`: like `ruff check --show-settings`, what each file is judged against and why."""
    from mpdoctor.engine import file_targets

    found, errors = file_targets(paths, config)
    for shown, target in found:  # each line escaped alone: a name's newline must not forge a line
        print("\n".join(escape_controls(line) for line in (shown, *target.describe())))
    for error in errors:
        print(escape_controls(error.render()), file=sys.stderr)
    return EXIT_ERROR if errors else EXIT_OK


def show_contexts(paths: list[Path], config, *, verbose: bool = False, stream=None) -> int:
    """`check --show-contexts`: every model builder the project analysis reached, with its policy contexts."""
    from mpdoctor.engine import analyse_projects, collect_files, display_path

    stream = stream or sys.stdout
    files, errors, skipped = collect_files(paths, config)
    for skip in skipped:
        print(escape_controls(f"mpdoctor: note: {skip.path}: skipped: {skip.message}"), file=sys.stderr)
    for error in errors:
        print(escape_controls(error.render()), file=sys.stderr)
    projects = analyse_projects(list(paths), files, config)
    if verbose:
        for note in projects.notes:
            print(escape_controls(f"mpdoctor: {note}"), file=sys.stderr)
    builders = projects.builders
    for builder in builders:
        where = "called from another module" if builder.across_modules else "called in its own module"
        stream.write(escape_controls(f"{builder.shown}:{builder.line} {builder.qualname} ({where})") + "\n")
        width = max(len(c.policy or "unknown") for c in builder.contexts)
        for context in builder.contexts:
            how = context.describe().split(", ", 1)[-1] if context.origin else "no policy set"
            entry = display_path(Path(context.entry)) if context.entry else ""
            if entry and f"{entry}:" not in context.route() and f"{entry} cell" not in context.route():
                how += f" (entry point {entry})"  # the route starts in the helper or module that set it
            line = f"    {(context.policy or 'unknown').ljust(width)}  {how}: {context.route()}"
            stream.write(escape_controls(line) + "\n")
    if not builders:
        stream.write("No model builder is reached from an entry point that sets a dtype policy.\n")
    return EXIT_ERROR if errors else EXIT_OK


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # does not exist (yet): nothing to overwrite
        return False
