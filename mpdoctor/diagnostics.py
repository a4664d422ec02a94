"""Frozen result types. Presentation (colour, layout) lives in mpdoctor.report, never here."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


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


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    location: Location
    severity: Severity
    passes: tuple[str, ...] = ("static",)
    confidence: Confidence = Confidence.HIGH
    fix: Fix | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        from mpdoctor.registry import get_rule

        return get_rule(self.code).name

    def sort_key(self) -> tuple:
        loc = self.location
        return (loc.path, loc.cell or 0, loc.line, loc.column, self.code, self.message)
