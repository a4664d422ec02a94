"""What trace checks get besides the facts: where the file is, how to anchor diagnostics, and the file's static
context for building source fixes. Imported by the parent: no TensorFlow here.

A layer of its own, above the static pass and below the rules and the trace pass: the rules' trace checks take it,
the trace pass (mpdoctor.trace.checks) makes it, and neither imports the other for it."""

from __future__ import annotations

import ast
import functools
import os

from mpdoctor.diagnostics import Confidence, Diagnostic, Fix, Location
from mpdoctor.facts.records import SourceRef
from mpdoctor.facts.tf_releases import release_text
from mpdoctor.project.target import Target
from mpdoctor.registry import get_rule
from mpdoctor.static.context import StaticContext
from mpdoctor.static.semantic import Settings


class TraceContext:
    def __init__(
        self, path: str, display_path: str, text: str, tree: ast.Module | None, settings: Settings | None = None
    ) -> None:
        self.path = os.path.realpath(path)
        self.display_path = display_path
        self.text = text
        self.tree = tree
        self.settings = settings or Settings()

    @functools.cached_property
    def static(self) -> StaticContext | None:
        if self.tree is None:
            return None
        return StaticContext(self.path, self.display_path, self.text, self.tree, self.settings)

    @property
    def target(self) -> Target | None:
        """The file's TensorFlow/Keras target (mpdoctor.project.target), None for a file that did not parse."""
        if self.settings.target is not None:
            return self.settings.target
        return self.static.target if self.static is not None else None

    @functools.cached_property
    def observed_note(self) -> str:
        """ " (observed on TensorFlow 2.21; target: ...)" when the run's TensorFlow is outside the file's target:
        what the trace saw may differ on the target."""
        target = self.target
        if target is None or target.installed is None or target.installed_in_range:
            return ""
        return f" (observed on TensorFlow {release_text(target.installed)}; target: {target.summary()})"

    def shown(self, file: str | None) -> str:
        if not file or os.path.realpath(file) == self.path:
            return self.display_path
        relative = os.path.relpath(file)
        return file if relative.startswith("..") else relative

    def location(self, where: SourceRef | None, layer: str | None = None) -> Location:
        """A Location from a place the trace saw; the whole file (line 1) when unknown."""
        if where is None or not where.line:
            return Location(self.display_path, 1, 1, 1, 1, layer=layer)
        line = where.line
        shown = self.shown(where.file)
        column, end_column = 1, 1
        if shown == self.display_path and self.static is not None and 0 < line <= len(self.static.lines):
            text = self.static.lines[line - 1]
            column = len(text) - len(text.lstrip()) + 1
            end_column = len(text.rstrip()) + 1
        return Location(shown, line, column, line, end_column, layer=layer)

    def at_line(self, line: int | None) -> SourceRef | None:
        """A place in the checked file itself."""
        return SourceRef(self.path, line) if line else None

    def diagnostic(
        self,
        code: str,
        where: SourceRef | None,
        message: str,
        *,
        layer: str | None = None,
        confidence: Confidence = Confidence.HIGH,
        fix: Fix | None = None,
        notes: tuple[str, ...] = (),
        observed_note: bool = True,
    ) -> Diagnostic:
        """`observed_note`: say in the message when the run's TensorFlow is outside the file's target."""
        return Diagnostic(
            code=code,
            message=message + (self.observed_note if observed_note else ""),
            location=self.location(where, layer),
            severity=get_rule(code).severity,
            passes=("trace",),
            confidence=confidence,
            fix=fix,
            notes=notes,
        )

    def call_at(self, line: int | None, *names: str) -> ast.Call | None:
        """The outermost call starting on `line` whose callee's last name part is one of `names` (any call when no
        names are given; None when several match): the constructor a trace finding points at, for its fix."""
        if self.static is None or not line:
            return None
        found = []
        for call in self.static.calls:
            if call.lineno != line:
                continue
            callee = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
            if not names or callee in names:
                found.append(call)
        # Two `Dense(...)` on one line: the facts (file, line) cannot tell which one; no fix beats a wrong one.
        if names and len(found) > 1:
            return None
        return found[0] if found else None

    def float32_fix(self, where: SourceRef | None, names: tuple[str, ...], description: str) -> Fix | None:
        """`dtype="float32"` on the constructor call of one of `names` the trace located at `where` (none when it
        cannot be told which call, or the call passes `**kwargs`)."""
        call = self.call_at(where.line if where else None, *names)
        if call is None or self.static is None or any(k.arg is None for k in call.keywords):
            return None
        return self.static.add_keyword_fix(call, "dtype", '"float32"', description)
