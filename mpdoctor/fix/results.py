"""What --fix did (or --diff would do) to one file, and the verification verdicts it reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from mpdoctor.diagnostics import Diagnostic
from mpdoctor.fix.apply import unified_diff

VERIFIED = "verified"
UNVERIFIED = "unverified (no trace pass)"
RE_TRACED = "the trace re-ran; the training step was not compared with float32"
STEP_VERIFIED = "verified by a training step"
REJECTED = "rejected"  # nothing applied: the check of the fixed text failed ("rejected: <why>")


@dataclass
class FileFix:
    """What --fix did (or --diff would do) to one file."""

    notebook: ClassVar[bool] = False  # a notebook's fixes are shown as diffs of its cells, never written

    shown: str
    original: str
    fixed: str
    applied: list[Diagnostic] = field(default_factory=list)
    not_applied: list[tuple[Diagnostic, str]] = field(default_factory=list)
    remaining: list[Diagnostic] | None = None  # diagnostics of the text that is on disk afterwards (if known)
    verification: str = UNVERIFIED
    # The training fixes whose step was compared with float32 and agreed ({id(diagnostic)}), and why the others of
    # the last round were not compared.
    step_verified: set = field(default_factory=set)
    step_unchecked: str | None = None
    written: bool = False
    error: str | None = None  # why nothing was written
    # {id(d)} of the applied fixes whose findings the checked report did not have: the earlier fixes uncovered them
    # (a second round), so they are counted apart from the "N fixable" check said.
    uncovered: set = field(default_factory=set)

    @property
    def found(self) -> list[Diagnostic]:
        """The applied fixes of findings the checked report had."""
        return [d for d in self.applied if id(d) not in self.uncovered]

    @property
    def uncovered_count(self) -> int:
        return len(self.applied) - len(self.found)

    @property
    def changed(self) -> bool:
        return self.fixed != self.original and self.error is None

    def diff(self) -> str:
        if not self.changed:
            return ""
        return unified_diff(self.original, self.fixed, self.shown)

    def to_dict(self) -> dict:
        def one(d: Diagnostic) -> dict:
            return {
                "code": d.code,
                "line": d.location.line,
                "description": d.fix.description if d.fix else "",
                "applicability": d.fix.applicability if d.fix else None,
            }

        return {
            "path": self.shown,
            "written": self.written,
            "verification": self.verification,
            "error": self.error,
            "applied": [one(d) for d in self.applied],
            "not_applied": [{**one(d), "reason": reason} for d, reason in self.not_applied],
        }
