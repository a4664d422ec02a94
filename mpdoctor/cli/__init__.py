"""Command line: `mpdoctor check`, `merge`, `plan`, `rules`, `explain`, `inspect`, `convert-checkpoint`. Each subcommand
module adds its parser and sets its handler (`args.handler(args) -> exit code`); the exit codes are in
exit_codes.py. Nothing here imports TensorFlow: `mpdoctor --help` and the static pass stay fast."""

from __future__ import annotations

import argparse
import os
import sys

from mpdoctor._version import __version__
from mpdoctor.cli.exit_codes import EXIT_ERROR


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit 2, like every usage error here
        self.exit(EXIT_ERROR, f"mpdoctor: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from mpdoctor.cli import artifacts, check, merge, plan, rules

    parser = Parser(
        prog="mpdoctor",
        description="Find mixed-precision (float16/bfloat16) breakage in TensorFlow/Keras code before it runs.",
    )
    parser.add_argument("--version", action="version", version=f"mpdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    check.add_parser(sub)
    merge.add_parser(sub)
    plan.add_parser(sub)
    rules.add_parsers(sub)
    artifacts.add_inspect_parser(sub)
    artifacts.add_convert_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return EXIT_ERROR
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("mpdoctor: interrupted", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        return EXIT_ERROR
    except Exception as exc:  # an internal error is still one line and exit 2, never a traceback
        print(f"mpdoctor: internal error: {type(exc).__name__}: {exc} (please report this)", file=sys.stderr)
        if os.environ.get("MPDOCTOR_DEBUG"):
            raise
        return EXIT_ERROR
