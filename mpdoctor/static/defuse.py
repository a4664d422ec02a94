"""Def-use over one module: reads of a scope's own names that are not assigned on every path reaching them.

The guard every fix passes (mpdoctor.fix): a rewrite must not add such a read. A loss-scaling fix that makes the
float32 branch differentiate `scaled_loss`, which only the float16 branch assigns, turns that branch into a
NameError / UnboundLocalError; this module is what notices.

Definite assignment, as a compiler checks it: a name is defined after a statement when every path through the
statement that falls through assigns it. `if`: both arms (an arm that returns, raises, breaks or continues does not
fall through); loops: the body may not run at all; `try`: a handler may start before anything of the body ran.
Each function, class body and the module is a scope of its own; a name no statement of the scope binds is a global
or a closure variable and is not judged (its absence is not this scope's business). Reads inside a nested function
or lambda happen when it is called: not judged either. The analysis is exact for straight-line and branching code
and conservative for loops and `try`; since the guard compares a fix's result with the original, what both have in
common (a read guarded by a correlated condition, say) cancels out.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass(frozen=True)
class UndefinedRead:
    scope: str  # qualified name of the scope: `Trainer.train_step`, `<module>`
    name: str
    line: int


def undefined_reads(tree: ast.Module) -> list[UndefinedRead]:
    """Every read of a scope's own name that some path reaches without assigning it, in source order."""
    found: list[UndefinedRead] = []
    _Scope("<module>", tree.body, set(), found).run()
    return sorted(found, key=lambda r: (r.line, r.scope, r.name))


def introduced_undefined_reads(before: ast.Module, after: ast.Module) -> list[UndefinedRead]:
    """The reads of `after` that may be undefined beyond those `before` already had (counted per scope and name,
    so that lines moved by the rewrite do not matter)."""
    old = Counter((r.scope, r.name) for r in undefined_reads(before))
    new = []
    for read in undefined_reads(after):
        key = (read.scope, read.name)
        if old[key]:
            old[key] -= 1
        else:
            new.append(read)
    return new


def describe(reads: list[UndefinedRead]) -> str:
    """`scaled_loss` at line 21 (in train_step), ...: for a refusal message."""
    parts = [f"`{r.name}` at line {r.line}" + ("" if r.scope == "<module>" else f" (in {r.scope})") for r in reads]
    return ", ".join(parts[:3]) + (f" and {len(parts) - 3} more" if len(parts) > 3 else "")


class _Scope:
    """The flow analysis of one scope. `defined` sets are names assigned on every path so far; None stands for
    "no path falls through here" (after return / raise / break / continue)."""

    def __init__(self, qualname: str, body: list[ast.stmt], params: set[str], found: list[UndefinedRead]):
        self.qualname = qualname
        self.body = body
        self.params = params
        self.found = found
        self.local = _bound_names(body) | params
        self.nested: list[tuple[str, list[ast.stmt], set[str]]] = []

    def run(self) -> None:
        self.block(self.body, set(self.params))
        for name, body, params in self.nested:
            prefix = "" if self.qualname == "<module>" else f"{self.qualname}."
            _Scope(prefix + name, body, params, self.found).run()

    # ------------------------------------------------------------------ statements

    def block(self, stmts: list[ast.stmt], defined: set[str] | None) -> set[str] | None:
        for stmt in stmts:
            if defined is None:
                return None  # unreachable code is not judged
            defined = self.statement(stmt, defined)
        return defined

    def statement(self, stmt: ast.stmt, defined: set[str]) -> set[str] | None:
        """The names defined after `stmt` (None: it does not fall through)."""
        step = _STATEMENTS.get(type(stmt), _Scope.expression_statement)  # the parser makes no subclasses
        return step(self, stmt, defined)

    def definition(self, stmt: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, defined: set[str]) -> set[str]:
        """Decorators, bases and defaults run now; the body is a scope of its own, judged after this one."""
        for decorator in stmt.decorator_list:
            defined = self.expr(decorator, defined)
        if isinstance(stmt, ast.ClassDef):
            for base in [*stmt.bases, *(k.value for k in stmt.keywords)]:
                defined = self.expr(base, defined)
            self.nested.append((stmt.name, stmt.body, set()))
        else:
            for default in [*stmt.args.defaults, *(d for d in stmt.args.kw_defaults if d is not None)]:
                defined = self.expr(default, defined)
            self.nested.append((stmt.name, stmt.body, _parameters(stmt.args)))
        return defined | {stmt.name}

    def assign(self, stmt: ast.Assign, defined: set[str]) -> set[str]:
        defined = self.expr(stmt.value, defined)
        for target in stmt.targets:
            defined = self.target(target, defined)
        return defined

    def augmented_assign(self, stmt: ast.AugAssign, defined: set[str]) -> set[str]:
        defined = self.expr(stmt.value, defined)
        if isinstance(stmt.target, ast.Name):
            self.read(stmt.target.id, stmt.target, defined)
            return defined | {stmt.target.id}
        return self.target(stmt.target, defined)

    def annotated_assign(self, stmt: ast.AnnAssign, defined: set[str]) -> set[str]:
        if stmt.value is None:
            return defined
        return self.target(stmt.target, self.expr(stmt.value, defined))

    def leave(self, stmt: ast.Return | ast.Raise, defined: set[str]) -> None:
        for child in ast.iter_child_nodes(stmt):
            defined = self.expr(child, defined)
        return None

    def jump(self, stmt: ast.Break | ast.Continue, defined: set[str]) -> None:
        return None

    def if_statement(self, stmt: ast.If, defined: set[str]) -> set[str] | None:
        defined = self.expr(stmt.test, defined)
        return _meet(self.block(stmt.body, set(defined)), self.block(stmt.orelse, set(defined)))

    def for_loop(self, stmt: ast.For | ast.AsyncFor, defined: set[str]) -> set[str] | None:
        defined = self.expr(stmt.iter, defined)
        self.block(stmt.body, self.target(stmt.target, set(defined)))
        return _meet(defined, self.block(stmt.orelse, set(defined)))  # the body may not run

    def while_loop(self, stmt: ast.While, defined: set[str]) -> set[str] | None:
        defined = self.expr(stmt.test, defined)
        self.block(stmt.body, set(defined))
        return _meet(defined, self.block(stmt.orelse, set(defined)))

    def with_statement(self, stmt: ast.With | ast.AsyncWith, defined: set[str]) -> set[str] | None:
        for item in stmt.items:
            defined = self.expr(item.context_expr, defined)
            if item.optional_vars is not None:
                defined = self.target(item.optional_vars, defined)
        return self.block(stmt.body, defined)

    def match_statement(self, stmt: ast.Match, defined: set[str]) -> set[str] | None:
        defined = self.expr(stmt.subject, defined)
        arms = []
        for case in stmt.cases:
            arm = defined | _pattern_names(case.pattern)
            if case.guard is not None:
                arm = self.expr(case.guard, arm)
            arms.append(self.block(case.body, arm))
        return _meet(defined, *arms)  # no case may match

    def import_statement(self, stmt: ast.Import | ast.ImportFrom, defined: set[str]) -> set[str]:
        return defined | {(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"}

    def delete(self, stmt: ast.Delete, defined: set[str]) -> set[str]:
        for target in stmt.targets:
            if isinstance(target, ast.Name):
                self.read(target.id, target, defined)
                defined = defined - {target.id}
            else:
                defined = self.expr(target, defined)
        return defined

    def declaration(self, stmt: ast.Global | ast.Nonlocal | ast.Pass, defined: set[str]) -> set[str]:
        return defined

    def expression_statement(self, stmt: ast.stmt, defined: set[str]) -> set[str]:
        for child in ast.iter_child_nodes(stmt):  # Expr, Assert
            defined = self.expr(child, defined)
        return defined

    def try_statement(self, stmt: ast.Try, defined: set[str]) -> set[str] | None:
        body = self.block(stmt.body, set(defined))
        ends = [self.block(stmt.orelse, set(body)) if body is not None else None]
        for handler in stmt.handlers:
            start = set(defined)  # the exception may come before anything of the body ran
            if handler.type is not None:
                start = self.expr(handler.type, start)
            if handler.name:
                start = start | {handler.name}
            ends.append(self.block(handler.body, start))
        after = _meet(*ends)
        if stmt.finalbody:
            final = self.block(stmt.finalbody, set(defined))
            if final is None:
                return None
            after = None if after is None else after | final
        return after

    # ------------------------------------------------------------------ expressions

    def target(self, target: ast.AST, defined: set[str]) -> set[str]:
        if isinstance(target, ast.Name):
            return defined | {target.id}
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                defined = self.target(element, defined)
            return defined
        if isinstance(target, ast.Starred):
            return self.target(target.value, defined)
        return self.expr(target, defined)  # `self.x = ...`, `a[i] = ...`: reads `self`, `a`, `i`

    def expr(self, node: ast.AST, defined: set[str]) -> set[str]:
        """Judge the reads of an expression (in evaluation order, near enough); returns `defined` plus what its
        walrus assignments bind on every path."""
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                self.read(node.id, node, defined)
            return defined
        if isinstance(node, ast.NamedExpr):
            return self.expr(node.value, defined) | {node.target.id}
        if isinstance(node, ast.Lambda):
            for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
                defined = self.expr(default, defined)
            return defined  # the body runs when it is called
        if isinstance(node, _COMPREHENSIONS):
            return self.comprehension(node, defined)
        if isinstance(node, (ast.BoolOp, ast.IfExp)):
            first = node.values[0] if isinstance(node, ast.BoolOp) else node.test
            defined = self.expr(first, defined)
            rest = node.values[1:] if isinstance(node, ast.BoolOp) else [node.body, node.orelse]
            for child in rest:
                self.expr(child, set(defined))  # runs on some paths only: what it binds does not count
            return defined
        for child in ast.iter_child_nodes(node):
            defined = self.expr(child, defined)
        return defined

    def comprehension(self, node: ast.AST, defined: set[str]) -> set[str]:
        generators = node.generators  # type: ignore[attr-defined]
        defined = self.expr(generators[0].iter, defined)  # the only part evaluated in this scope
        own: set[str] = set()
        inner = set(defined)
        for index, generator in enumerate(generators):
            if index:
                self.expr_without(generator.iter, inner, own)
            names = {n.id for n in ast.walk(generator.target) if isinstance(n, ast.Name)}
            own |= names
            inner |= names
            for condition in generator.ifs:
                self.expr_without(condition, inner, own)
        elements = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]  # type: ignore[attr-defined]
        for element in elements:
            self.expr_without(element, inner, own)
        return defined

    def expr_without(self, node: ast.AST, defined: set[str], own: set[str]) -> None:
        """Reads inside a comprehension: its own loop variables are not this scope's names."""
        saved = self.local
        self.local = saved - own
        try:
            self.expr(node, defined)
        finally:
            self.local = saved

    def read(self, name: str, node: ast.AST, defined: set[str]) -> None:
        if name in self.local and name not in defined:
            self.found.append(UndefinedRead(self.qualname, name, getattr(node, "lineno", 0)))


_STATEMENTS: dict[type, Callable[[_Scope, Any, set[str]], set[str] | None]] = {
    ast.FunctionDef: _Scope.definition,
    ast.AsyncFunctionDef: _Scope.definition,
    ast.ClassDef: _Scope.definition,
    ast.Assign: _Scope.assign,
    ast.AugAssign: _Scope.augmented_assign,
    ast.AnnAssign: _Scope.annotated_assign,
    ast.Return: _Scope.leave,
    ast.Raise: _Scope.leave,
    ast.Break: _Scope.jump,
    ast.Continue: _Scope.jump,
    ast.If: _Scope.if_statement,
    ast.For: _Scope.for_loop,
    ast.AsyncFor: _Scope.for_loop,
    ast.While: _Scope.while_loop,
    ast.With: _Scope.with_statement,
    ast.AsyncWith: _Scope.with_statement,
    ast.Try: _Scope.try_statement,
    getattr(ast, "TryStar", ast.Try): _Scope.try_statement,  # Python 3.11+
    ast.Match: _Scope.match_statement,
    ast.Import: _Scope.import_statement,
    ast.ImportFrom: _Scope.import_statement,
    ast.Delete: _Scope.delete,
    ast.Global: _Scope.declaration,
    ast.Nonlocal: _Scope.declaration,
    ast.Pass: _Scope.declaration,
}


def _meet(*paths: set[str] | None) -> set[str] | None:
    """Names defined after paths join: those every falling-through path defines (None: none falls through)."""
    live = [p for p in paths if p is not None]
    if not live:
        return None
    return set.intersection(*live)


def _parameters(args: ast.arguments) -> set[str]:
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return set(names)


def _pattern_names(pattern: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(pattern):
        for attr in ("name", "rest"):
            value = getattr(node, attr, None)
            if isinstance(value, str):
                names.add(value)
    return names


def _bound_names(body: list[ast.stmt]) -> set[str]:
    """The names a scope binds (Python's rule for what is local), not looking into nested scopes; names declared
    global or nonlocal are not this scope's."""
    bound: set[str] = set()
    declared: set[str] = set()
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            stack.extend(node.decorator_list)
            if not isinstance(node, ast.ClassDef):
                stack.extend([*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)])
            continue
        if isinstance(node, (ast.Lambda, *_COMPREHENSIONS)):
            continue  # scopes of their own (a walrus in a comprehension binds here: rare, ignored)
        bound.update(_names_bound_by(node))
        stack.extend(ast.iter_child_nodes(node))
    return bound - declared


def _names_bound_by(node: ast.AST) -> list[str]:
    """The names one node of a scope binds itself: an assigned or deleted name, an import, an `except ... as`, a
    walrus, a capture pattern."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return [node.id]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
    if isinstance(node, ast.ExceptHandler) and node.name:
        return [node.name]
    if isinstance(node, ast.NamedExpr):
        return [node.target.id]
    if isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
        return [node.name]
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [node.rest]
    return []
