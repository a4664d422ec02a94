"""IPython/Jupyter extension: `%load_ext mpdoctor`, then

    %mpdoctor model            the trace rules on a live model object of the kernel, in this process (no child
                               process, nothing re-run: its graph, SavedModel signatures and environment, like the
                               trace pass sees them; see mpdoctor.trace.live for what an in-process run cannot know)
    %mpdoctor path/to/model.py the full check of a file or directory (static pass + trace in a child process)
    %%mpdoctor                 checks the cell's code as if it were a file: the static pass, and the trace pass in a
                               child process (the cell must be self-contained there). The cell is NOT run in the
                               kernel: run it normally once it is clean.

`--no-trace` limits a file or cell check to the static pass. Selection, ignores and the trace timeout come from the
[tool.mpdoctor] table of the pyproject.toml above the working directory. The result renders as the HTML report in a
notebook (`_repr_html_`, isolated in a sandboxed iframe) and as the text report in a terminal IPython.
"""

from __future__ import annotations

import html as html_module
import io
import os
import shlex
import tempfile
import uuid
from dataclasses import replace
from pathlib import Path

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from mpdoctor.facts.keras_semantics import MODEL_CLASS_NAMES

USAGE = "usage: %mpdoctor [--no-trace] MODEL_OR_PATH, or %%mpdoctor [--no-trace] on a cell"
# Where a %%mpdoctor cell's findings are: `cell:7:35`, the line as the visible cell counts it (its magic line is 1).
CELL = "cell"
MAX_FRAME_HEIGHT = "80vh"
# The report's height, posted by its report.js from the sandboxed frame, fits the frame (up to MAX_FRAME_HEIGHT).
_FIT_FRAME = (
    '(function () { var frame = document.getElementById("FRAME_ID"); window.addEventListener("message", '
    "function (event) { var height = event.data && event.data.mpdoctorReportHeight; "
    'if (frame && event.source === frame.contentWindow && typeof height === "number") { '
    'frame.style.height = "min(" + Math.ceil(height + 4) + "px, 80vh)"; } }); })();'
)


class CheckResult:
    """What a magic returns: the Report, shown as HTML in a notebook and as text in a terminal."""

    def __init__(self, report) -> None:
        self.report = report

    @property
    def diagnostics(self):
        return self.report.diagnostics

    def html(self) -> str:
        from mpdoctor.report.html import render

        out = io.StringIO()
        render(self.report, out)
        return out.getvalue()

    def _repr_html_(self) -> str:
        # The report is a whole page (its own CSS and Content-Security-Policy): a sandboxed iframe keeps its styles
        # out of the notebook and the notebook's out of it. Sandboxed, its height cannot be read from here: the
        # report posts it (report.js) and the script below fits the frame to it, up to most of the window (the
        # frame scrolls beyond); where outputs run no script, the frame keeps that most and can be resized.
        frame = f"mpdoctor-report-{uuid.uuid4().hex}"
        return (
            f'<iframe id="{frame}" class="mpdoctor-report" sandbox="allow-scripts" '
            f'srcdoc="{html_module.escape(self.html())}" style="width: 100%; height: {MAX_FRAME_HEIGHT}; '
            'resize: vertical; border: 1px solid #d0d7de; border-radius: 6px"></iframe>'
            f"<script>{_FIT_FRAME.replace('FRAME_ID', frame)}</script>"
        )

    def __repr__(self) -> str:
        from mpdoctor.cli.check import problem_lines
        from mpdoctor.report.text import render

        out = io.StringIO()
        # What `check` says on stderr (a file that does not parse, cannot be read, is skipped) comes first, as there.
        out.writelines(line + "\n" for line in problem_lines(self.report))
        render(self.report, out, colour=False)
        return out.getvalue().rstrip("\n")


def _config():
    from mpdoctor.config import load_config

    return load_config(Path.cwd())


def check_model(model, name: str = "model") -> CheckResult:
    from mpdoctor.diagnostics import Report
    from mpdoctor.trace.live import check_live_model

    diagnostics, summary = check_live_model(model, name, _config())
    report = Report(diagnostics=diagnostics, live_model=True, passes=("trace",), traces=[summary])
    return CheckResult(report)


def _trace_options(config, trace: bool):
    from mpdoctor.engine import TraceOptions
    from mpdoctor.trace.runner import backend_missing

    enabled = trace and backend_missing(config.keras_backend) is None
    return TraceOptions(enabled=enabled, timeout=config.trace_timeout, entry=config.entry)


def check_path(path: Path, trace: bool = True) -> CheckResult:
    from mpdoctor.engine import check_paths

    config = _config()
    return CheckResult(check_paths([path], config, _trace_options(config, trace)))


def check_cell(source: str, trace: bool = True, magic_line: str = "%%mpdoctor") -> CheckResult:
    """The cell's code checked as a file (in a temporary directory, removed afterwards), reported as `cell`. Its
    first line is left blank where the visible cell has `magic_line`, so every line number (of a finding, in a
    message, of the trace) is the one the notebook shows."""
    from mpdoctor.diagnostics import Report, SourceText
    from mpdoctor.engine import check_source

    config = _config()
    options = _trace_options(config, trace)
    report = Report(files_checked=1, passes=("static", "trace") if options.enabled else ("static",))
    report.sources[CELL] = SourceText(Path(CELL), f"{magic_line}\n{source}")
    checked = "\n" + source
    with tempfile.TemporaryDirectory(prefix="mpdoctor-cell-") as directory:
        path = os.path.join(directory, "cell.py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(checked)
        diagnostics, error = check_source(checked, CELL, config, path=path, trace=options, traces=report.traces)
    # No file to run --fix on: the fixes are shown (the HTML report's diffs of the cell), never suggested.
    report.diagnostics = [
        replace(d, fix=None, cell_fix=_below_the_magic_line(replace(d.fix, cell=1))) if d.fix is not None else d
        for d in diagnostics
    ]
    if error is not None and error.kind == "syntax":  # a cell that does not parse was not checked
        report.files_checked = 0
    report.errors = [error] if error else []
    return CheckResult(report)


def _below_the_magic_line(fix):
    """The fix with what it inserts at the very start (an import, before the blank first line) inserted below the
    magic line instead, where it belongs in the visible cell."""
    from mpdoctor.diagnostics import Edit

    def moved(edit: Edit) -> Edit:
        if (edit.line, edit.column, edit.end_line, edit.end_column) == (1, 1, 1, 1):
            return replace(edit, line=2, end_line=2)
        return edit

    return replace(fix, edits=tuple(moved(edit) for edit in fix.edits))


def _is_model(value) -> bool:
    return any(
        cls.__name__ in MODEL_CLASS_NAMES and cls.__module__.split(".")[0] in ("keras", "tf_keras")
        for cls in type(value).__mro__
    )


@magics_class
class MpdoctorMagics(Magics):
    @line_cell_magic
    def mpdoctor(self, line: str, cell: str | None = None):
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"mpdoctor: {exc}; {USAGE}") from None
        trace = "--no-trace" not in words
        words = [w for w in words if w != "--no-trace"]
        unknown = [w for w in words if w.startswith("--")]
        if unknown:
            raise UsageError(f"mpdoctor: unknown option {unknown[0]}; {USAGE}")
        if cell is not None:
            if words:
                raise UsageError(f"mpdoctor: %%mpdoctor takes no target, it checks the cell; {USAGE}")
            return check_cell(cell, trace, f"%%mpdoctor {line}".rstrip())
        if len(words) != 1:
            raise UsageError(f"mpdoctor: {USAGE}")
        target = words[0]
        if os.path.exists(target):
            return check_path(Path(target), trace)
        try:
            value = self.shell.ev(target)
        except Exception as exc:
            raise UsageError(
                f"mpdoctor: {target}: no such file, and not a model in the kernel ({type(exc).__name__}: {exc})"
            ) from None
        if isinstance(value, (str, os.PathLike)) and os.path.exists(value):
            return check_path(Path(value), trace)
        if not _is_model(value):
            raise UsageError(f"mpdoctor: {target} is a {type(value).__name__}, not a Keras model or a path")
        return check_model(value, getattr(value, "name", None) or target)


def load_ipython_extension(ipython) -> None:
    ipython.register_magics(MpdoctorMagics)
