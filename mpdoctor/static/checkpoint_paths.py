"""Checkpoint paths and the objects that write or read them, in a file's source: comparable keys of path
expressions (a literal, a `latest_checkpoint` of a directory or manager, the result of a `save`), their literal
suffix, and whether a restored path is one the file itself saved (MP301)."""

from __future__ import annotations

import ast

from mpdoctor.static.astutil import keyword_value
from mpdoctor.static.context import StaticContext
from mpdoctor.static.tf1_graphs import resolved_value, tf1_call_name


def path_key(ctx: StaticContext, expr: ast.AST | None, at: ast.AST, depth: int = 0) -> tuple:
    """A comparable description of a checkpoint path expression."""
    if expr is None or depth > 6:
        return ("none",)
    if isinstance(expr, ast.Constant):
        return ("str", expr.value)
    if isinstance(expr, ast.Name):
        value = ctx.last_assignment(expr.id, at) or ctx.module_constants.get(expr.id)
        return path_key(ctx, value, at, depth + 1) if value is not None else ("name", expr.id)
    if isinstance(expr, ast.Attribute) and expr.attr == "latest_checkpoint":
        return ("latest", ("manager", ctx.segment(expr.value)))
    if isinstance(expr, ast.Call):
        key = _call_path_key(ctx, expr, at, depth)
        if key is not None:
            return key
    return ("text", ast.dump(expr))


def _call_path_key(ctx: StaticContext, call: ast.Call, at: ast.AST, depth: int) -> tuple | None:
    """`latest_checkpoint(dir)`, `os.path.join` of literals, the result of a `save` / `write`."""
    method = call.func.attr if isinstance(call.func, ast.Attribute) else None
    if method == "latest_checkpoint":
        directory = call.args[0] if call.args else keyword_value(call, "checkpoint_dir")
        return ("latest", ("dir", path_key(ctx, directory, at, depth + 1)))
    if (tf1_call_name(ctx, call) or "").endswith("path.join") and call.args:
        parts = [path_key(ctx, a, at, depth + 1) for a in call.args]
        if all(p[0] == "str" and isinstance(p[1], str) for p in parts):
            return ("str", "/".join(p[1].rstrip("/") for p in parts))
    if method in ("save", "write"):
        return ("saved", call)
    return None


def path_suffix(ctx: StaticContext, expr: ast.AST | None, at: ast.AST, depth: int = 0) -> str | None:
    """The literal end of a path expression (`"w.h5"`, f"{d}/w.h5", os.path.join(d, "ckpt")), or None."""
    if expr is None or depth > 6:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.JoinedStr) and expr.values and isinstance(expr.values[-1], ast.Constant):
        return str(expr.values[-1].value)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return path_suffix(ctx, expr.right, at, depth + 1)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):  # pathlib: d / "w.h5"
        return path_suffix(ctx, expr.right, at, depth + 1)
    if isinstance(expr, ast.Call) and expr.args and (tf1_call_name(ctx, expr) or "").endswith(("path.join", "Path")):
        return path_suffix(ctx, expr.args[-1], at, depth + 1)
    if isinstance(expr, ast.Name):
        value = ctx.last_assignment(expr.id, at) or ctx.module_constants.get(expr.id)
        return path_suffix(ctx, value, at, depth + 1) if value is not None else None
    return None


def receiver_call(ctx: StaticContext, call: ast.Call, names: tuple[str, ...]) -> ast.Call | None:
    """For `obj.method(...)`, the constructor call of `obj` when it is one of `names`."""
    if not isinstance(call.func, ast.Attribute):
        return None
    obj = resolved_value(ctx, call.func.value, call)
    if isinstance(obj, ast.Call) and tf1_call_name(ctx, obj) in names:
        return obj
    if isinstance(obj, ast.Attribute) and isinstance(obj.value, ast.Name) and obj.value.id == "self":
        value = ctx.self_attribute(obj, obj.attr)
        if isinstance(value, ast.Call) and tf1_call_name(ctx, value) in names:
            return value
    return None


def describe_path(ctx: StaticContext, expr: ast.AST | None) -> str:
    text = ctx.segment(expr) if expr is not None else ""
    return text if text and len(text) <= 60 and "\n" not in text else "the checkpoint"


def own_checkpoint(restored: tuple, saves: list[tuple[tuple, ast.Call]]) -> bool:
    """True when the restored path is one this file saved from low-precision variables."""
    if restored[0] == "saved":
        return any(call is restored[1] for _, call in saves)
    if restored[0] == "latest":
        where = restored[1]
        if where[0] == "manager":
            return any(key == where for key, _ in saves)
        directory = where[1]
        if directory[0] != "str":
            return bool(saves)  # a directory we cannot read: it may well be the one saved to
        return any(
            key == ("dir", directory)
            or _inside(key, directory[1])
            or key[0] in ("name", "text", "none")
            or (key[0] == "dir" and key[1][0] != "str")
            for key, _ in saves
        )
    return any(key == restored for key, _ in saves)


def _inside(key: tuple, directory) -> bool:
    return (
        key[0] == "str"
        and isinstance(key[1], str)
        and isinstance(directory, str)
        and key[1].startswith(directory.rstrip("/") + "/")
    )
