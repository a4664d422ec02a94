"""Frozen result types. Presentation (colour, layout) lives in mpdoctor.report, never here."""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mpdoctor.facts.schema import TraceSummary
    from mpdoctor.project.target import Target


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"info": 0, "warning": 1, "error": 2}[self.value]


class Confidence(str, enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


PASS_NAMES = {"S": "static", "T": "trace", "A": "artifact"}


@dataclass(frozen=True, order=True)
class Location:
    """1-based line and column; end is exclusive like Python's ast end_col_offset + 1."""

    path: str
    line: int = 1
    column: int = 1
    end_line: int | None = None
    end_column: int | None = None
    layer: str | None = None
    cell: int | None = None  # notebooks: the cell (from 1); line and end_line are then lines within the cell


@dataclass(frozen=True)
class Edit:
    """Replace [start, end) of the file at `path` by `content` (1-based lines and columns)."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    content: str


@dataclass(frozen=True)
class Fix:
    description: str
    edits: tuple[Edit, ...]
    applicability: str = "safe"  # "safe" | "unsafe"
    cell: int | None = None  # a fix of a notebook cell: its edits are lines of that cell (see Diagnostic.cell_fix)
    # Changes what a training step computes (loss scaling): re-tracing the file shows it builds and the finding is
    # gone, not that the step still trains right, so such a fix is never called "verified" on that ground.
    changes_training: bool = False


@dataclass(frozen=True)
class DiagnosticContext:
    """The policy context a finding exists in when the project analysis found it (mpdoctor.static.policy_context):
    the policy, where and when it is set, and the calls from there to the finding's function."""

    policy: str | None
    set_at: str | None  # `train.py:14`; None: no policy set (Keras's default)
    condition: str | None  # `when --amp is given`
    path: tuple[str, ...] = ()  # `train.py:14 set_global_policy("mixed_float16")`, `train.py:16 build_classifier()`

    def to_dict(self) -> dict[str, object]:
        return {"policy": self.policy, "set_at": self.set_at, "condition": self.condition, "path": list(self.path)}


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    location: Location
    severity: Severity
    passes: tuple[str, ...] = ("static",)
    confidence: Confidence = Confidence.HIGH
    fix: Fix | None = None  # what --fix applies to the file
    notes: tuple[str, ...] = field(default=())
    # A fix that is shown (as a diff of the cell), never applied: in a notebook, whose .ipynb JSON the edits of a
    # cell's lines would corrupt, and in a %%mpdoctor cell. `fix` is then None.
    cell_fix: Fix | None = None
    context: DiagnosticContext | None = None  # set when only a project's policy context makes this a finding

    def sort_key(self) -> tuple[Any, ...]:
        loc = self.location
        return (loc.path, loc.cell or 0, loc.line, loc.column, self.code, self.message)


@dataclass(frozen=True)
class FileError:
    """A file that could not be checked: unreadable, not Python, or an internal error."""

    path: str
    message: str
    line: int | None = None
    column: int | None = None
    kind: str = "error"  # "syntax" | "io" | "internal"
    cell: int | None = None  # notebooks: line is then the line within this cell

    def render(self) -> str:
        if self.cell is not None:
            where = f"{self.path}:cell {self.cell}:line {self.line}:col {self.column}"
        else:
            where = f"{self.path}:{self.line}:{self.column}" if self.line else self.path
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class SourceText:
    path: Path  # the file on disk
    text: str  # what was analysed: the file, or a notebook's code cells as one program
    cells: dict[int, list[str]] | None = None  # notebooks: each code cell's lines as written, by cell number

    def line(self, number: int, cell: int | None = None) -> str | None:
        """Line `number` (from 1) of the file, or of `cell` in a notebook."""
        if self.cells is not None:
            lines = self.cells.get(cell) if cell is not None else None
        else:
            lines = self._lines
        return lines[number - 1] if lines is not None and 1 <= number <= len(lines) else None

    @functools.cached_property
    def _lines(self) -> list[str]:
        return self.text.splitlines()

    def text_of(self, cell: int | None = None) -> str | None:
        """The text a location's line counts in: the file, or a notebook cell."""
        if self.cells is None:
            return self.text
        lines = self.cells.get(cell) if cell is not None else None
        return None if lines is None else "\n".join(lines)


@dataclass
class Report:
    """Everything a run found, and everything a renderer needs: renderers read nothing else (no files)."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    skipped: list[FileError] = field(default_factory=list)  # found in a walk, left alone (FIFOs, devices): notes
    files_checked: int = 0  # files read and parsed
    live_model: bool = False  # a live model of a Jupyter kernel was checked (no file): the summaries say so
    passes: tuple[str, ...] = ("static",)
    traces: list[TraceSummary] = field(default_factory=list)  # per traced file: graphs, SavedModels, environment
    baselined: int = 0  # findings left out because the --baseline file lists them
    shard: tuple[int, int] | None = None  # `check --shard I/N`: (I, N), so that `merge` can require every shard once
    fixes: list[Any] | None = None  # --fix/--diff: one mpdoctor.fix.results.FileFix per file with fixes
    sources: dict[str, SourceText] = field(default_factory=dict)  # display path -> the text analysed
    targets: dict[str, Target] = field(default_factory=dict)  # display path -> its TensorFlow/Keras target
    notes: list[str] = field(default_factory=list)  # how the run went, for --verbose (project analysis, fallbacks)
    # display path -> the policy contexts (mpdoctor.static.policy_context.FileContexts) the file was checked with,
    # for files a project's entry points reach: --fix re-checks a fixed text with the same contexts
    contexts: dict[str, object] = field(default_factory=dict)
    # id(diagnostic) -> (that diagnostic, its text in the one output format the run asked to pre-render, computed
    # beside the check, in the static pass's worker processes): see Report.prerendered_text
    prerendered: dict[int, tuple[Diagnostic, str]] = field(default_factory=dict)

    def prerendered_text(self, diagnostic: Diagnostic) -> str | None:
        """The pre-rendered text of this very diagnostic (a replaced or re-created one has none; the entry holds
        its diagnostic, so an id is never reused while the report lives)."""
        entry = self.prerendered.get(id(diagnostic))
        return entry[1] if entry is not None and entry[0] is diagnostic else None

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Severity}
        for d in self.diagnostics:
            counts[d.severity.value] += 1
        return counts

    def by_code(self) -> dict[str, int]:
        result: dict[str, int] = {}
        for d in self.diagnostics:
            result[d.code] = result.get(d.code, 0) + 1
        return dict(sorted(result.items()))

    def unchecked(self) -> int:
        """How many files could not be checked (unreadable, unparsable, not a regular file, an internal error)."""
        return len({e.path for e in self.errors})

    def fixable(self) -> int:
        return sum(1 for d in self.diagnostics if d.fix is not None)

    def summary(self) -> dict[str, Any]:
        summary = {
            "files": self.files_checked,
            "total": len(self.diagnostics),
            "by_severity": self.counts(),
            "by_code": self.by_code(),
            "fixable": self.fixable(),
            "errors": len(self.errors),
            "passes": list(self.passes),
            "baselined": self.baselined,
        }
        if self.fixes is not None:
            summary["fixed"] = sum(len(f.applied) for f in self.fixes if f.written)
        return summary
