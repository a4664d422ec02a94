"""Jupyter notebooks (.ipynb, nbformat 4) as one Python source, and diagnostics mapped back to cells.

The code cells are joined in order into one source that the static pass parses and the trace child runs. IPython
syntax that is not Python becomes a placeholder of the same line count: line magics (`%pip install x`), shell lines
(`!ls`, with their `\\` continuation lines), help lines (`model.fit?`) become `pass` (an assignment `x = !ls` keeps
its target: `x = None`), the lines they continue onto become blank; a cell magic's cell (`%%bash`) becomes blank
lines, except the magics whose body is Python (`%%time`, `%%capture`...), where only the magic line is blanked.
What is IPython syntax is decided by IPython's own input transformer (`IPython.core.inputtransformer2`) when
IPython is installed, by a faithful reading of the same rules otherwise. Cells are numbered from 1 over all cells of
the file (markdown included), as they are listed in the notebook; lines from 1 within the cell. Reading is plain
JSON: nbformat is not needed. Messages that name a line of the combined program ("line 93") are rewritten to name
the cell and its line ("cell 5, line 3"), like the locations.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from mpdoctor.diagnostics import Diagnostic, Edit, Fix, Location
from mpdoctor.facts.records import source_refs
from mpdoctor.reads import read_bytes

SUFFIX = ".ipynb"
# Cell magics whose body is Python code run by IPython (checked and traced like any cell).
PYTHON_BODY_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_ASSIGNED_MAGIC = re.compile(r"^(\s*)([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)\s*=\s*[!%]")
# `%name` and `%%` (no space: `% b` continuing an expression is Python), `!cmd` (not `!=`), `?name`.
_MAGIC = re.compile(r"^(\s*)(?:%[A-Za-z_%]|!(?!=)|\?)")
_HELP = re.compile(r"^(\s*)[\w.]+(?:\(\))?\?{1,2}\s*$")
_CELL_MAGIC = re.compile(r"^\s*%%(\w+)")
# "line 93" / "lines 93" in a message, not the `File "x.py", line 93` of a traceback.
_LINE_REFERENCE = re.compile(r'(?<!", )(?<!",)\bline (\d+)\b')
_TRANSFORM_LIMIT = 500  # IPython's own bound on rewriting one cell


class NotebookError(ValueError):
    """Not a readable nbformat 4 notebook (one line, reported like an unreadable file)."""


def is_notebook(path) -> bool:
    return str(path).lower().endswith(SUFFIX)


@dataclass(frozen=True)
class Notebook:
    source: str  # the code cells joined, IPython syntax replaced by placeholders
    line_map: tuple[tuple[int, int], ...]  # combined line - 1 -> (cell number, line in cell)
    cell_lines: dict[int, list[str]]  # each code cell's original lines, by cell number

    def cell_line(self, cell: int, line: int) -> str | None:
        lines = self.cell_lines.get(cell)
        return lines[line - 1] if lines is not None and 1 <= line <= len(lines) else None

    def to_cell(self, line: int) -> tuple[int | None, int]:
        if not self.line_map:
            return None, 1
        return self.line_map[min(max(line, 1), len(self.line_map)) - 1]

    def map_location(self, loc: Location) -> Location:
        cell, line = self.to_cell(loc.line)
        end_line, end_column = None, loc.end_column
        if loc.end_line is not None:
            end_cell, end_line = self.to_cell(loc.end_line)
            if end_cell != cell:  # a span cannot leave its cell in the rendered notebook
                end_line, end_column = line, None
        return replace(loc, line=line, end_line=end_line, end_column=end_column, cell=cell)

    def map_diagnostic(self, d: Diagnostic, shown: str) -> Diagnostic:
        """Locations in the cell. A fix is never carried as a fix of the file (its edits are lines of the combined
        source, not of the .ipynb file, and applying them would corrupt the JSON): it becomes the diagnostic's
        `cell_fix`, its edits in the lines of its cell, which --diff and the HTML report show as a diff of the
        cell."""
        if d.location.path != shown:
            return d
        notes, cell_fix = tuple(self.map_text(note) for note in d.notes), None
        if d.fix is not None:
            cell_fix = self.cell_fix(d.fix)
            shown_as = f"shown as a diff of cell {cell_fix.cell}" if cell_fix else "it spans cells"
            notes += (f"fix not applied to notebooks ({shown_as}): {self.map_text(d.fix.description)}",)
        location = self.map_location(d.location)
        return replace(d, message=self.map_text(d.message), location=location, fix=None, notes=notes, cell_fix=cell_fix)

    def cell_fix(self, fix: Fix) -> Fix | None:
        """The fix with its edits in the lines of the one cell they touch (None when they touch several)."""
        edits, cells = [], set()
        for edit in fix.edits:
            cell, line = self.to_cell(edit.line)
            end_cell, end_line = self.to_cell(edit.end_line)
            cells |= {cell, end_cell}
            edits.append(Edit(edit.path, line, edit.column, end_line, edit.end_column, edit.content))
        if len(cells) != 1 or None in cells:
            return None
        return replace(fix, edits=tuple(edits), cell=cells.pop())

    def map_text(self, text: str) -> str:
        """ "line 93" of the combined program, in a message, as "cell 5, line 3". Lines of tracebacks
        (`File "x.py", line 93`) belong to other files and are left alone."""

        def cell_line(match: re.Match) -> str:
            line = int(match.group(1))
            if not 1 <= line <= len(self.line_map):
                return match.group(0)
            cell, in_cell = self.line_map[line - 1]
            return f"cell {cell}, line {in_cell}"

        return _LINE_REFERENCE.sub(cell_line, text)

    def map_results(self, shown: str, path: Path, diagnostics: list[Diagnostic], error, traces: list):
        """The engine's results for the combined source, located in cells: diagnostics, a syntax error, and the
        places in the trace summaries (SourceRefs of this file gain a `cell`)."""
        diagnostics = [self.map_diagnostic(d, shown) for d in diagnostics]
        if error is not None and error.line:
            cell, line = self.to_cell(error.line)
            error = replace(error, line=line, cell=cell)
        identity = os.path.realpath(path)
        for summary in traces:
            for ref in source_refs(summary):
                if isinstance(ref.file, str) and isinstance(ref.line, int) and os.path.realpath(ref.file) == identity:
                    ref.cell, ref.line = self.to_cell(ref.line)
        return diagnostics, error


def read_notebook(path: Path) -> Notebook:
    try:
        data = json.loads(read_bytes(path))
    except ValueError as exc:
        raise NotebookError(f"not a valid notebook: invalid JSON ({exc})") from None
    except RecursionError:
        raise NotebookError("not a valid notebook: JSON nested too deeply") from None
    return parse_notebook(data)


def parse_notebook(data) -> Notebook:
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        version = data.get("nbformat") if isinstance(data, dict) else None
        hint = f" (nbformat {version}: convert with `jupyter nbconvert --to notebook`)" if version else ""
        raise NotebookError(f"not an nbformat 4 notebook{hint}")
    problem = _malformed(data)
    if problem:
        raise NotebookError(f"not a valid notebook: {problem}")
    lines: list[str] = []
    line_map: list[tuple[int, int]] = []
    cell_lines: dict[int, list[str]] = {}
    if _is_python(data.get("metadata")):
        for number, cell in enumerate(data["cells"], start=1):
            if cell.get("cell_type") != "code":
                continue
            source = cell.get("source", "")
            text = "".join(source) if isinstance(source, list) else source
            original = _LINE_BREAK.split(text)
            if original and original[-1] == "":
                original.pop()
            cell_lines[number] = original
            lines += python_lines(original)
            line_map += [(number, i) for i in range(1, len(original) + 1)]
    return Notebook("\n".join(lines) + "\n" if lines else "", tuple(line_map), cell_lines)


def _malformed(data: dict) -> str | None:
    """What makes an nbformat 4 document unusable here (the shapes the nbformat schema requires of what we read),
    or None."""
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        return f"metadata is {_json_type(metadata)}, not an object"
    for key in ("kernelspec", "language_info"):
        if key in metadata and not isinstance(metadata[key], dict):
            return f"metadata.{key} is {_json_type(metadata[key])}, not an object"
    for number, cell in enumerate(data["cells"], start=1):
        if not isinstance(cell, dict):
            return f"cell {number} is {_json_type(cell)}, not an object"
        if not isinstance(cell.get("cell_type"), str):
            return f"cell {number} has no cell_type"
        source = cell.get("source", "")
        if not isinstance(source, str) and not (isinstance(source, list) and all(isinstance(s, str) for s in source)):
            return f"cell {number}: source is {_json_type(source)}, not a string or a list of strings"
    return None


def _json_type(value) -> str:
    if isinstance(value, list):
        return "a list" if not value or not all(isinstance(v, str) for v in value) else "a list of strings"
    names = {dict: "an object", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _is_python(metadata) -> bool:
    """A notebook whose kernel is another language has no Python to check."""
    if not isinstance(metadata, dict):
        return True
    for value in (
        (metadata.get("kernelspec") or {}).get("language"),
        (metadata.get("language_info") or {}).get("name"),
    ):
        if isinstance(value, str) and value:
            return value.lower() == "python"
    return True


def python_lines(cell: list[str]) -> list[str]:
    """One cell's lines with IPython syntax replaced by placeholders of the same line count."""
    if cell:
        magic = _CELL_MAGIC.match(cell[0])
        if magic:
            if magic.group(1) in PYTHON_BODY_MAGICS:
                return [""] + python_lines(cell[1:])
            return [""] * len(cell)  # %%bash, %%writefile, %%html...: not Python
    lines = _ipython_lines(cell)
    return lines if lines is not None else _fallback_lines(cell)


@functools.cache
def _ipython():
    """IPython's input transformer and its tokenizer, or None when IPython is not installed."""
    try:
        from IPython.core.inputtransformer2 import TokenTransformBase, TransformerManager, make_tokens_by_line
    except Exception:  # not installed, or an IPython that cannot be imported here
        return None
    return TransformerManager(), make_tokens_by_line, TokenTransformBase.sortby


def _ipython_lines(cell: list[str]) -> list[str] | None:
    """IPython's own reading of the cell, one piece of special syntax at a time (as
    `TransformerManager.do_one_token_transform` does), each replaced by a placeholder where IPython would put its
    `get_ipython()` call, and the lines it continued onto left blank. None without IPython or when its rewriting
    does not keep to the cell's lines."""
    found = _ipython()
    if found is None:
        return None
    manager, tokens_of, sortby = found
    lines = [line + "\n" for line in cell]
    try:
        for cleanup in manager.cleanup_transforms:
            if getattr(cleanup, "__name__", "") == "leading_empty_lines":
                continue  # it drops lines; the placeholders keep them
            cleaned = cleanup(lines)
            if len(cleaned) == len(lines):  # prompts (`>>> `) and a common indent are stripped in place
                lines = cleaned
        for _ in range(_TRANSFORM_LIMIT):
            tokens = tokens_of(lines)
            candidates = [found for cls in manager.token_transformers if (found := cls.find(tokens))]
            step = None
            for transformer in sorted(candidates, key=sortby):
                try:
                    step = transformer, transformer.transform(lines)
                    break
                except SyntaxError:
                    continue
            if step is None:
                break
            transformer, rewritten = step
            start, consumed = transformer.start_line, len(lines) - len(rewritten) + 1
            if consumed < 1 or not 0 <= start < len(lines):
                return None
            prefix = lines[start][: transformer.start_col]
            placeholder = prefix + ("None" if prefix.strip() else "pass") + "\n"  # `x = !ls` keeps its target
            lines = lines[:start] + [placeholder] + ["\n"] * (consumed - 1) + lines[start + consumed :]
    except Exception:  # IPython's tokenizer on text it was not written for: use the fallback
        return None
    if len(lines) != len(cell):
        return None
    return [line[:-1] if line.endswith("\n") else line for line in lines]


# IPython's cleanup of pasted code: a common leading indent, `>>> ` / `... ` and `In [1]: ` / `...: ` prompts.
_INDENT = re.compile(r"^[ \t]+")
_PROMPTS = (
    (re.compile(r"^>>>( |$)"), re.compile(r"^(>>>|\.\.\.)( |$)")),
    (re.compile(r"^In \[\d+\]: "), re.compile(r"^(In \[\d+\]: |\s*\.{3,}: ?)")),
)


def _strip_leading_indent(cell: list[str]) -> list[str]:
    indent = _INDENT.match(cell[0]) if cell else None
    if indent is None:
        return cell
    space = indent.group(0)
    return [line[len(space) :] if line.startswith(space) else line for line in cell]


def _strip_prompts(cell: list[str]) -> list[str]:
    for initial, prompt in _PROMPTS:
        if cell and (initial.match(cell[0]) or (len(cell) > 1 and prompt.match(cell[1]))):
            cell = [prompt.sub("", line, count=1) for line in cell]
    return cell


def _fallback_lines(cell: list[str]) -> list[str]:
    """The same placeholders without IPython: a line starting with IPython syntax (outside a continued Python
    line), and the lines a trailing backslash continues it onto."""
    cell = _strip_prompts(_strip_leading_indent(cell))
    out = []
    continued = False  # a line after a backslash continuation of Python is never a magic
    magic_continues = False  # a line after a backslash-continued magic is part of that magic
    for line in cell:
        if magic_continues:
            magic_continues = line.rstrip().endswith("\\")
            out.append("")
            continue
        if not continued:
            assigned = _ASSIGNED_MAGIC.match(line)
            placeholder = None
            if assigned:
                placeholder = f"{assigned.group(1)}{assigned.group(2)} = None"
            elif _MAGIC.match(line) or _HELP.match(line):
                placeholder = line[: len(line) - len(line.lstrip())] + "pass"
            if placeholder is not None:
                magic_continues = line.rstrip().endswith("\\")
                out.append(placeholder)
                continue
        out.append(line)
        continued = line.rstrip().endswith("\\")
    return out
