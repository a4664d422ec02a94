"""Command line: `mpdoctor check`, `merge`, `plan`, `rules`, `explain`, `inspect`, `convert-checkpoint`, `server`.
Each subcommand module adds its parser and sets its handler (`args.handler(args) -> exit code`); the exit codes are
in exit_codes.py. Nothing here imports TensorFlow: `mpdoctor --help` and the static pass stay fast."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from mpdoctor._version import __version__
from mpdoctor.cli.exit_codes import EXIT_ERROR, EXIT_INTERRUPTED
from mpdoctor.printable import escape_controls

# The libraries whose versions decide what the trace sees, by their distribution names.
VERSIONED_LIBRARIES = ("tensorflow", "keras", "tf-keras", "tensorflow-hub")


def version_text() -> str:
    """mpdoctor's version and the versions of the libraries it checks against, read from package metadata (importing
    TensorFlow would take seconds)."""
    from importlib.metadata import PackageNotFoundError, version

    lines = [f"mpdoctor {__version__}"]
    for name in VERSIONED_LIBRARIES:
        try:
            found = version(name)
        except PackageNotFoundError:
            found = "not installed"
        lines.append(f"{name} {found}")
    lines.append(f"python {sys.version.split()[0]}")
    return "\n".join(lines)


class _Version(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit 2, like every usage error here
        self.exit(EXIT_ERROR, f"mpdoctor: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from mpdoctor.cli import artifacts, check, merge, plan, rules, server

    parser = Parser(
        prog="mpdoctor",
        description="Find mixed-precision (float16/bfloat16) breakage in TensorFlow/Keras code before it runs.",
    )
    parser.add_argument(
        "--version", action=_Version, help="show mpdoctor's version and the TensorFlow/Keras versions it sees"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    check.add_parser(sub)
    merge.add_parser(sub)
    plan.add_parser(sub)
    rules.add_parsers(sub)
    artifacts.add_inspect_parser(sub)
    artifacts.add_convert_parser(sub)
    server.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from mpdoctor.signals import Terminated, signals_raise

    _escape_unencodable_output()
    arguments = sys.argv[1:] if argv is None else argv
    ambiguous = _file_named_like_an_option(arguments)
    if ambiguous is not None:
        print(
            f"mpdoctor: error: {escape_controls(ambiguous)}: a file of that name exists, and it reads as an option;"
            " put file names after -- (mpdoctor check -- FILE ...)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    parser = build_parser()
    args = parser.parse_args(arguments)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return EXIT_ERROR
    try:
        # SIGTERM/SIGHUP unwind like Ctrl-C: the trace child's process tree is ended and temporary files removed.
        with signals_raise():
            return args.handler(args)
    except KeyboardInterrupt:
        print("mpdoctor: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated as exc:
        print(f"mpdoctor: terminated ({exc})", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return EXIT_ERROR
    except Exception as exc:  # an internal error is still one line and exit 2, never a traceback
        line = f"mpdoctor: internal error: {type(exc).__name__}: {exc} (please report this)"
        print(escape_controls(line), file=sys.stderr)  # the exception may quote a user's path or name
        if os.environ.get("MPDOCTOR_DEBUG"):
            raise
        return EXIT_ERROR


def _file_named_like_an_option(arguments: list[str]) -> str | None:
    """The first argument before `--` that starts with `-` and names an existing file. A tool that passes file names
    without `--` (a pre-commit hook, `xargs`, a glob) would have a committed file named `-osetup.py` read as
    `-o setup.py`, and the report written over setup.py: such a name is refused instead of guessed."""
    for argument in arguments:
        if argument == "--":
            return None
        if argument.startswith("-") and argument != "-" and os.path.lexists(argument):
            return argument
    return None


def _escape_unencodable_output() -> None:
    """A character stdout cannot encode (a lone surrogate from a non-UTF-8 file name or forged facts) is printed
    as a backslash escape instead of ending the run with UnicodeEncodeError (stderr already does this)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")
