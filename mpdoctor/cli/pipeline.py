"""The steps `check` and `plan` run in the same order: validate the arguments, build the run's options, run, render,
write the files the user named (-o, --html), then the exit code. A step that ends the run early (a usage error, or an
option such as --show-target that answers and exits) raises Exit, its message already printed.

Imported by every run: standard library only (a static run's start-up is measured, tests/test_lazy_imports.py)."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mpdoctor.cli.exit_codes import EXIT_ERROR
from mpdoctor.printable import escape_controls


class Exit(Exception):
    """Ends the run with `code`; whatever there was to say is printed."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def fail(message: str) -> Exit:
    """Print `mpdoctor: error: message` (control characters escaped: paths and names come from the user) and return
    the Exit (code 2) to raise."""
    print(escape_controls(f"mpdoctor: error: {message}"), file=sys.stderr)
    return Exit(EXIT_ERROR)


@dataclass(frozen=True)
class Output:
    """A rendered report for a file the user named; `summary` ("3 problems in 2 files"), when set, is said on stderr
    once the file is written: with -o nothing else would show the run's outcome."""

    path: Path
    text: str
    summary: str | None = None


def write_outputs(outputs: list[Output], *, refuse: Sequence[Path] = (), failure: str) -> None:
    """Write each output atomically, never over a file in `refuse` (those checked: a forgotten argument must not
    replace one); the first that fails ends the run with `{path}: {failure}: {reason}`."""
    if not outputs:
        return
    from mpdoctor.writes import write_atomic  # tempfile and friends: only for a run that writes a file

    for output in outputs:
        try:
            write_atomic(output.path, output.text, refuse=refuse)
        except OSError as exc:
            raise fail(f"{output.path}: {failure}: {exc.strerror or exc}") from None
        if output.summary and _regular_file(output.path):  # not for -o /dev/stdout: the report is on the stream
            print(escape_controls(f"mpdoctor: wrote {output.path}: {output.summary}"), file=sys.stderr)


def _regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


class Pipeline(ABC):
    """One run of a subcommand. Each step keeps what the next needs on the instance."""

    write_failure = "cannot write"  # how a failed write of an output starts its reason

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    def execute(self) -> int:
        try:
            self.validate()
            self.options()
            self.run()
            write_outputs(self.render(), refuse=self.refused(), failure=self.write_failure)
        except Exit as stop:
            return stop.code
        return self.exit_code()

    @abstractmethod
    def validate(self) -> None:
        """Refuse arguments that cannot work, and read the configuration, before anything runs."""

    @abstractmethod
    def options(self) -> None:
        """The options of the run (the trace's above all) from the arguments and the configuration."""

    @abstractmethod
    def run(self) -> None:
        """The work itself."""

    @abstractmethod
    def render(self) -> list[Output]:
        """Print what goes to the terminal; return what goes to files."""

    @abstractmethod
    def refused(self) -> Sequence[Path]:
        """The files an output must never replace."""

    @abstractmethod
    def exit_code(self) -> int:
        """The exit code of a run that went to the end."""
