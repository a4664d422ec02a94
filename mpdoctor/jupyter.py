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
from dataclasses import replace
from pathlib import Path

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from mpdoctor.facts.keras_semantics import MODEL_CLASS_NAMES

USAGE = "usage: %mpdoctor [--no-trace] MODEL_OR_PATH, or %%mpdoctor [--no-trace] on a cell"


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
        # out of the notebook and the notebook's out of it.
        return (
            f'<iframe class="mpdoctor-report" sandbox="allow-scripts" srcdoc="{html_module.escape(self.html())}" '
            'style="width: 100%; height: 640px; border: 1px solid #d0d7de; border-radius: 6px"></iframe>'
        )

    def __repr__(self) -> str:
        from mpdoctor.report.text import render

        out = io.StringIO()
        live = self.report.files_checked == 0  # a live model: no file to count
        render(self.report, out, colour=False, quiet=live)
        if live:
            found = len(self.report.diagnostics)
            out.write(
                f"Found {found} problem{'' if found == 1 else 's'} in the live model."
                if found
                else "All checks passed (live model)."
            )
        return out.getvalue().rstrip("\n")


def _config():
    from mpdoctor.config import load_config

    return load_config(Path.cwd())


def check_model(model, name: str = "model") -> CheckResult:
    from mpdoctor.diagnostics import Report
    from mpdoctor.trace.live import check_live_model

    diagnostics, summary = check_live_model(model, name, _config())
    return CheckResult(Report(diagnostics=diagnostics, files_checked=0, passes=("trace",), traces=[summary]))


def _trace_options(config, trace: bool):
    from mpdoctor.engine import TraceOptions
    from mpdoctor.trace.runner import tensorflow_available

    return TraceOptions(enabled=trace and tensorflow_available(), timeout=config.trace_timeout, entry=config.entry)


def check_path(path: Path, trace: bool = True) -> CheckResult:
    from mpdoctor.engine import check_paths

    config = _config()
    return CheckResult(check_paths([path], config, _trace_options(config, trace)))


def check_cell(source: str, trace: bool = True) -> CheckResult:
    """The cell's code checked as a file named cell.py (in a temporary directory, removed afterwards)."""
    from mpdoctor.diagnostics import Report, SourceText
    from mpdoctor.engine import check_source

    config = _config()
    options = _trace_options(config, trace)
    report = Report(files_checked=1, passes=("static", "trace") if options.enabled else ("static",))
    report.sources["cell.py"] = SourceText(Path("cell.py"), source)
    with tempfile.TemporaryDirectory(prefix="mpdoctor-cell-") as directory:
        path = os.path.join(directory, "cell.py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(source)
        diagnostics, error = check_source(source, "cell.py", config, path=path, trace=options, traces=report.traces)
    # No file to run --fix on: the fixes are shown (the HTML report's diffs of the cell), never suggested.
    report.diagnostics = [
        replace(d, fix=None, cell_fix=replace(d.fix, cell=1)) if d.fix is not None else d for d in diagnostics
    ]
    report.errors = [error] if error else []
    return CheckResult(report)


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
            return check_cell(cell, trace)
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
