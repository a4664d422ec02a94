"""Source edits that several fixes share: statements added after a module's imports, the local name of an
imported module, a policy literal rewritten."""

from __future__ import annotations

import ast

from mpdoctor.diagnostics import Edit, Fix
from mpdoctor.facts.records import PolicyEvent
from mpdoctor.static.context import StaticContext
from mpdoctor.static.policies import POLICY_CONSTRUCTORS


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
    rest = ctx.lines[anchor.end_lineno - 1][ctx.column(anchor.end_lineno, anchor.end_col_offset) - 1 :].strip()
    if rest and not rest.startswith("#"):
        return None
    newline = "\r\n" if "\r\n" in ctx.text else "\n"
    line = anchor.end_lineno + 1
    return Edit(ctx.display_path, line, 1, line, 1, text.replace("\n", newline))


def module_alias(ctx: StaticContext, *modules: str) -> str | None:
    """The local name bound to one of `modules` by an import (`tf` for `import tensorflow as tf`)."""
    return next((name for name, target in ctx.imports.aliases.items() if target in modules), None)


def policy_literal_fix(ctx: StaticContext, event: PolicyEvent, mixed: str) -> Fix | None:
    arg = event.node.args[0] if event.node.args else (event.node.keywords[0].value if event.node.keywords else None)
    literal = _policy_literal(ctx, arg, 0)
    if literal is None:
        return None
    return Fix(f"use the {mixed!r} policy", (ctx.edit(literal, quoted_like(ctx, literal, mixed)),))


def _policy_literal(ctx: StaticContext, expr: ast.AST | None, depth: int) -> ast.AST | None:
    """The node holding the policy value that can be replaced by a string literal."""
    if expr is None or depth > 3:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr
    if isinstance(expr, ast.Call) and ctx.call_name(expr) in POLICY_CONSTRUCTORS:
        inner = expr.args[0] if expr.args else next((k.value for k in expr.keywords if k.arg == "name"), None)
        return _policy_literal(ctx, inner, depth + 1)
    if isinstance(expr, ast.Attribute) and (ctx.resolve(expr) or "") in ("tf.float16", "tf.bfloat16", "tf.half"):
        return expr
    if isinstance(expr, ast.Name) and expr.id in ctx.module_constants:
        uses = [n for n in ctx.nodes if isinstance(n, ast.Name) and n.id == expr.id and isinstance(n.ctx, ast.Load)]
        if len(uses) == 1:  # edit the constant only when nothing else reads it
            return _policy_literal(ctx, ctx.module_constants[expr.id], depth + 1)
    return None


def quoted_like(ctx: StaticContext, literal: ast.AST, value: str) -> str:
    text = ctx.segment(literal)
    quote = text[:1] if text[:1] in ("'", '"') and isinstance(literal, ast.Constant) else '"'
    return f"{quote}{value}{quote}"
