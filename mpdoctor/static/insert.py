"""Edits that add whole statements to a module (a class, an import, a policy call) right after its imports."""

from __future__ import annotations

import ast

from mpdoctor.diagnostics import Edit
from mpdoctor.static.context import StaticContext


def after_imports(ctx: StaticContext, before: ast.AST, text: str) -> Edit | None:
    """Insert `text` (whole lines, "\\n"-terminated) on the line after the last top-level import statement above
    `before`; None when there is none or it shares its line with other code. Uses the file's line endings."""
    anchor = None
    for stmt in ctx.tree.body:
        if stmt.lineno >= before.lineno:
            break
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            anchor = stmt
    if anchor is None:
        return None
    rest = ctx.lines[anchor.end_lineno - 1][ctx.column(anchor.end_lineno, anchor.end_col_offset) - 1:].strip()
    if rest and not rest.startswith("#"):
        return None
    newline = "\r\n" if "\r\n" in ctx.text else "\n"
    line = anchor.end_lineno + 1
    return Edit(ctx.display_path, line, 1, line, 1, text.replace("\n", newline))


def module_alias(ctx: StaticContext, *modules: str) -> str | None:
    """The local name bound to one of `modules` by an import (`tf` for `import tensorflow as tf`)."""
    return next((name for name, target in ctx.imports.aliases.items() if target in modules), None)
