"""Source edits that fixes are built from: a node's source replaced, a keyword argument added or changed, an
argument removed, statements added after a module's imports, a policy literal rewritten. Each works from the file's
semantic model (mpdoctor.static.semantic) and its text; rules reach the first three through their checker
(`ctx.edit`, `ctx.add_keyword_fix`, `ctx.remove_argument`)."""

from __future__ import annotations

import ast

from mpdoctor.diagnostics import Edit, Fix
from mpdoctor.facts.records import PolicyEvent
from mpdoctor.static.policies import POLICY_CONSTRUCTORS
from mpdoctor.static.semantic import SemanticModel


def replace_node(model: SemanticModel, node: ast.AST, content: str) -> Edit:
    """Replace the source of `node` by `content`."""
    return Edit(model.source.display_path, *model.source.span(node), content)


def add_keyword(model: SemanticModel, call: ast.Call, keyword: str, value: str, description: str) -> Fix:
    """Insert `keyword=value` as the last argument of `call`, or replace an existing value. A `"float32"` dtype
    is spelled the way the file already spells it."""
    source = model.source
    if keyword == "dtype" and value == '"float32"':
        value = model.float32_spelling
        description = description.replace('"float32"', value)
    for kw in call.keywords:
        if kw.arg == keyword:
            return Fix(description, (replace_node(model, kw.value, value),))
    end_line, end_col = call.end_lineno, call.end_col_offset - 1  # the closing parenthesis
    before = source.text_before(end_line, end_col).rstrip()
    if call.args or call.keywords:
        text = f" {keyword}={value}" if before.endswith(",") else f", {keyword}={value}"
    else:
        text = f"{keyword}={value}"
    # Insert right after the last argument so a trailing comment or newline layout survives.
    last = max(
        [*call.args, *[k.value for k in call.keywords]],
        key=lambda n: (n.end_lineno, n.end_col_offset),
        default=None,
    )
    if last is not None and not before.endswith(","):
        line, col = last.end_lineno, last.end_col_offset
    else:
        line, col = end_line, end_col
    col = source.column(line, col)
    return Fix(description, (Edit(source.display_path, line, col, line, col, text),))


def remove_argument(model: SemanticModel, call: ast.Call, value: ast.AST) -> Edit | None:
    """An edit deleting the argument of `call` whose value is `value` (`activation="softmax"` or a positional
    one) with the comma that separates it from its neighbour; None when it cannot be told where it is."""
    elements = sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))
    index = next((i for i, e in enumerate(elements) if e is value or getattr(e, "value", None) is value), None)
    if index is None or any(isinstance(e, ast.Starred) for e in elements):
        return None
    element = elements[index]
    if index > 0:  # from the end of the previous argument: `Dense(10, activation="softmax")` -> `Dense(10)`
        start, end = elements[index - 1], element
        line, col, end_line, end_col = start.end_lineno, start.end_col_offset, end.end_lineno, end.end_col_offset
    elif len(elements) > 1:  # the first of several: up to the next one
        line, col = element.lineno, element.col_offset
        end_line, end_col = elements[1].lineno, elements[1].col_offset
    else:
        line, col, end_line, end_col = (
            element.lineno,
            element.col_offset,
            element.end_lineno,
            element.end_col_offset,
        )
    column = model.source.column
    return Edit(model.source.display_path, line, column(line, col), end_line, column(end_line, end_col), "")


def after_imports(model: SemanticModel, before: ast.AST, text: str) -> Edit | None:
    """Insert `text` (whole lines, "\\n"-terminated) on the line after the last top-level import statement above
    `before`; None when there is none or it shares its line with other code. Uses the file's line endings."""
    anchor = None
    for stmt in model.tree.body:
        if stmt.lineno >= before.lineno:
            break
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            anchor = stmt
    if anchor is None:
        return None
    source, end_line = model.source, anchor.end_lineno
    rest = source.lines[end_line - 1][source.column(end_line, anchor.end_col_offset) - 1 :].strip()
    if rest and not rest.startswith("#"):
        return None
    newline = "\r\n" if "\r\n" in source.text else "\n"
    line = end_line + 1
    return Edit(source.display_path, line, 1, line, 1, text.replace("\n", newline))


def module_alias(model: SemanticModel, *modules: str) -> str | None:
    """The local name bound to one of `modules` by an import (`tf` for `import tensorflow as tf`)."""
    return next((name for name, target in model.imports.aliases.items() if target in modules), None)


def policy_literal_fix(model: SemanticModel, event: PolicyEvent, mixed: str) -> Fix | None:
    arg = event.node.args[0] if event.node.args else (event.node.keywords[0].value if event.node.keywords else None)
    literal = _policy_literal(model, arg, 0)
    if literal is None:
        return None
    return Fix(f"use the {mixed!r} policy", (replace_node(model, literal, quoted_like(model, literal, mixed)),))


def _policy_literal(model: SemanticModel, expr: ast.AST | None, depth: int) -> ast.AST | None:
    """The node holding the policy value that can be replaced by a string literal."""
    if expr is None or depth > 3:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr
    if isinstance(expr, ast.Call) and model.call_name(expr) in POLICY_CONSTRUCTORS:
        inner = expr.args[0] if expr.args else next((k.value for k in expr.keywords if k.arg == "name"), None)
        return _policy_literal(model, inner, depth + 1)
    if isinstance(expr, ast.Attribute) and (model.resolve(expr) or "") in ("tf.float16", "tf.bfloat16", "tf.half"):
        return expr
    if isinstance(expr, ast.Name) and expr.id in model.module_constants:
        uses = [n for n in model.nodes if isinstance(n, ast.Name) and n.id == expr.id and isinstance(n.ctx, ast.Load)]
        if len(uses) == 1:  # edit the constant only when nothing else reads it
            return _policy_literal(model, model.module_constants[expr.id], depth + 1)
    return None


def quoted_like(model: SemanticModel, literal: ast.AST, value: str) -> str:
    text = model.source.segment(literal)
    quote = text[:1] if text[:1] in ("'", '"') and isinstance(literal, ast.Constant) else '"'
    return f"{quote}{value}{quote}"
