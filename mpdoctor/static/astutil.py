"""Small syntax-tree helpers shared by the static rules."""

from __future__ import annotations

import ast


def keyword_value(call: ast.Call, name: str) -> ast.AST | None:
    """The value of keyword argument `name` of `call`, or None."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def contains(tree: ast.AST, node: ast.AST) -> bool:
    """Whether `node` is `tree` or lies inside it."""
    return any(n is node for n in ast.walk(tree))


def binds(function: ast.AST, name: str) -> bool:
    """Whether `function` has a parameter called `name` or assigns to it."""
    args = function.args  # type: ignore[attr-defined]
    params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    params += [a.arg for a in (args.vararg, args.kwarg) if a]
    if name in params:
        return True
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(function))


def position(node: ast.AST) -> tuple[int, int]:
    """(line, column offset): source order of nodes."""
    return node.lineno, node.col_offset


def has_star_kwargs(call: ast.Call) -> bool:
    """Whether the call passes `**kwargs` (a keyword added by a fix might then be given twice)."""
    return any(kw.arg is None for kw in call.keywords)
