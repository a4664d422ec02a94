"""Notebooks in the editor (notebookDocument/*): the code cells checked together as `check` checks an .ipynb (one
program in cell order, IPython syntax replaced: mpdoctor.notebook), each finding published on its own cell with
its line in that cell. A cell alone would lack what earlier cells set (the policy), so cells are never checked one
by one. Static pass only: the trace of a notebook runs its generated program, which `check demo.ipynb` does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from lsprotocol import types

from mpdoctor.diagnostics import Diagnostic
from mpdoctor.notebook import Notebook, NotebookError, parse_notebook

# Jupyter notebooks' Python cells (VS Code's notebook type); the server then gets them as notebookDocument/*.
SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[
        types.NotebookDocumentFilterWithNotebook(
            notebook="jupyter-notebook", cells=[types.NotebookCellLanguage(language="python")]
        )
    ]
)


@dataclass(frozen=True)
class NotebookCheck:
    """What the cells of one notebook are checked as: the combined program and which cell each number is."""

    notebook: Notebook
    cells: list[str]  # the cell documents' uris, by cell number - 1 (markdown cells included, as .ipynb numbers them)

    @property
    def code_cells(self) -> list[str]:
        return [self.cells[number - 1] for number in self.notebook.cell_lines]

    def by_cell(self, findings: list[Diagnostic]) -> dict[str, list[Diagnostic]]:
        """The findings (located in cells by Notebook.map_results) of each code cell, fixes as edits of that cell's
        lines (a fix that spans cells is not offered)."""
        found: dict[str, list[Diagnostic]] = {uri: [] for uri in self.code_cells}
        for d in findings:
            cell = d.location.cell
            if cell is not None and 1 <= cell <= len(self.cells) and self.cells[cell - 1] in found:
                found[self.cells[cell - 1]].append(replace(d, fix=d.cell_fix, cell_fix=None))
        return found


def notebook_check(notebook: types.NotebookDocument, text_of: Callable[[str], str | None]) -> NotebookCheck | None:
    """The notebook's cells as mpdoctor.notebook reads an .ipynb (None if it cannot be read so)."""
    cells = [
        {
            "cell_type": "code" if cell.kind == types.NotebookCellKind.Code else "markdown",
            "source": text_of(cell.document) or "",
        }
        for cell in notebook.cells
    ]
    try:
        metadata: dict[str, object] = notebook.metadata if isinstance(notebook.metadata, dict) else {}
        parsed = parse_notebook({"nbformat": 4, "metadata": metadata, "cells": cells})
    except NotebookError:
        return None
    return NotebookCheck(parsed, [cell.document for cell in notebook.cells])
