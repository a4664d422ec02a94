"""`mpdoctor merge a.json b.json ...`: the `--format json` reports of `check --shard I/N` runs (CI matrix jobs) as
one report, in any format, with the baseline applied once. The reports must be one complete run (every shard once,
no file in two reports; see mpdoctor.merge). Run it in the same checkout: the text and baseline need the checked
files' text, read again from the reports' paths (only those under the current directory)."""

from __future__ import annotations

import sys
from pathlib import Path

from mpdoctor.cli.exit_codes import EXIT_ERROR


def add_parser(sub) -> None:
    from mpdoctor.report import FORMATS

    merge = sub.add_parser("merge", help="combine the JSON reports of sharded `check --shard` runs into one report")
    merge.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json")
    merge.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    merge.add_argument("-o", "--output", type=Path, metavar="FILE", help="write the report to FILE")
    merge.add_argument("--html", type=Path, metavar="FILE", help="also write the HTML report to FILE")
    merge.add_argument("--baseline", type=Path, metavar="FILE", help="leave out the findings FILE lists")
    merge.add_argument("--fail-on", choices=("error", "warning", "info"), help="(default: warning)")
    merge.add_argument("--exit-zero", action="store_true", help="exit 0 even when problems are found")
    merge.add_argument("--statistics", action="store_true", help="count findings per code")
    merge.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    merge.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    merge.set_defaults(handler=run_merge)


def run_merge(args) -> int:
    from mpdoctor.baseline import BaselineError, load_baseline, split
    from mpdoctor.cli.check import CheckRun, deliver
    from mpdoctor.config import Config, ConfigError, apply_overrides
    from mpdoctor.merge import ReportFormatError, check_complete, merge_reports, read_report
    from mpdoctor.printable import escape_controls
    from mpdoctor.writes import refusal

    config = Config()
    try:
        apply_overrides(config, "command line", fail_on=args.fail_on)
    except ConfigError as exc:
        print(escape_controls(f"mpdoctor: error: {exc}"), file=sys.stderr)
        return EXIT_ERROR
    for output in (args.output, args.html):  # before anything is read or printed
        problem = refusal(output, args.reports) if output else None
        if problem:
            print(escape_controls(f"mpdoctor: error: {output}: {CheckRun.write_failure}: {problem}"), file=sys.stderr)
            return EXIT_ERROR
    reads = []
    for path in args.reports:
        try:
            reads.append(read_report(path))
        except ReportFormatError as exc:
            print(escape_controls(f"mpdoctor: error: {path}: {exc}"), file=sys.stderr)
            return EXIT_ERROR
    try:
        check_complete(reads)
    except ReportFormatError as exc:
        print(escape_controls(f"mpdoctor: error: {exc}"), file=sys.stderr)
        return EXIT_ERROR
    report = merge_reports([read.report for read in reads])
    if args.baseline is not None:
        try:
            keys = load_baseline(args.baseline)
        except BaselineError as exc:
            print(escape_controls(f"mpdoctor: error: {exc}"), file=sys.stderr)
            return EXIT_ERROR
        report.diagnostics, baselined = split(report.diagnostics, report.sources, keys, args.baseline.parent)
        report.baselined += baselined
    for error in report.errors:
        print(escape_controls(error.render()), file=sys.stderr)
    return deliver(report, args, config, refuse=args.reports)
