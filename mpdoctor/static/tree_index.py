"""The one walk of a module's syntax tree that the static pass indexes everything by: each node's parent, the nodes
of each scope, the nodes of each ast type. Walking the tree is the static pass's largest cost, so the walk reads
child nodes through functions compiled per ast class instead of ast.iter_child_nodes."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef)
SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_SCOPE_TYPES = frozenset(SCOPE_NODES)  # the parser makes no subclasses: a set lookup instead of isinstance


def _field_types(cls: type) -> dict[str, str]:
    """Field name -> its type in the class's signature (its docstring, `Attribute(expr value, identifier attr,
    expr_context ctx)`): `expr`, `expr?` (may be None), `expr*` (a list); empty when there is no signature."""
    signature = re.fullmatch(r"\w+\((.*)\)", (cls.__doc__ or "").split("\n", 1)[0].strip())
    parts = signature[1].split(", ") if signature else []
    return {name: kind for kind, _, name in (part.rpartition(" ") for part in parts)}


def _node_fields(cls: type) -> tuple[str, ...]:
    """The fields of an ast class that may hold nodes of their own. Left out: those the signature types as a plain
    value (names, numbers, strings) and the shared singletons (the expression context Load/Store/Del and the
    operators), never a construct of their own: about a third of all fields."""
    typed = _field_types(cls)
    return tuple(name for name in cls._fields if typed.get(name, "").rstrip("?*") not in _NOT_NODES and name != "ctx")


_NOT_NODES = frozenset(
    {"identifier", "int", "string", "constant", "expr_context", "operator", "unaryop", "cmpop", "boolop"}
)
# Nodes that never hold a node (Name, Constant, alias, ...): the walk records them but need not visit them (two
# fifths of a typical tree).
_LEAVES = frozenset(
    cls for cls in vars(ast).values() if isinstance(cls, type) and issubclass(cls, ast.AST) and not _node_fields(cls)
)
# The lists of nodes that may hold None: `{**d}` has a None key, a keyword-only parameter without default a None.
_LISTS_WITH_NONE = frozenset({("Dict", "keys"), ("arguments", "kw_defaults")})
_CHILDREN: dict[type, Callable[[ast.AST], list[ast.AST]]] = {}


def _children_function(cls: type) -> Callable[[ast.AST], list[ast.AST]]:
    """A function returning the child nodes of a node of `cls` in field order, compiled from its signature on first
    use: straight-line attribute reads instead of a loop over field names with a getattr and type tests each
    (a sixth of the walk of every file). A field the signature does not type is tested as ast.iter_child_nodes
    does."""
    typed = _field_types(cls)
    lines = ["def children(node):", "    found = []"]
    for name in _node_fields(cls):
        kind = typed.get(name, "")
        if kind.endswith("*") and (cls.__name__, name) in _LISTS_WITH_NONE:
            lines.append(f"    found += [item for item in node.{name} if item is not None]")
        elif kind.endswith("*"):
            lines.append(f"    found += node.{name}")
        elif kind.endswith("?"):
            lines += [f"    value = node.{name}", "    if value is not None:", "        found.append(value)"]
        elif kind:
            lines.append(f"    found.append(node.{name})")
        else:
            lines += [
                f"    value = getattr(node, {name!r}, None)",
                "    if isinstance(value, list):",
                "        found += [item for item in value if isinstance(item, AST)]",
                "    elif isinstance(value, AST):",
                "        found.append(value)",
            ]
    namespace: dict = {"AST": ast.AST}
    exec("\n".join([*lines, "    return found"]), namespace)  # our own text, from ast's signatures
    function = _CHILDREN[cls] = namespace["children"]
    return function


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """ast.iter_child_nodes without its generators (the walk of every file is the static pass's largest cost) and
    without the expression contexts and operators."""
    cls = type(node)
    return (_CHILDREN.get(cls) or _children_function(cls))(node)


@dataclass
class TreeIndex:
    """What the one walk of a module records."""

    parents: dict[ast.AST, ast.AST]  # every node below the module, parents before children
    scope_nodes: dict[ast.AST, list[ast.AST]]  # module, def, class, lambda -> its nodes (not those of inner scopes)
    by_type: dict[type, list[ast.AST]]  # exact ast type -> its nodes


def index_tree(tree: ast.Module) -> TreeIndex:
    parents: dict[ast.AST, ast.AST] = {}
    scope_nodes: dict[ast.AST, list[ast.AST]] = {tree: []}
    by_type: dict[type, list[ast.AST]] = {}
    stack: list[tuple[ast.AST, list[ast.AST]]] = [(tree, scope_nodes[tree])]
    leaves, scope_types, children_of = _LEAVES, _SCOPE_TYPES, _CHILDREN
    while stack:  # child_nodes() inlined
        parent, members = stack.pop()
        cls = type(parent)
        if cls in scope_types:
            members = scope_nodes[parent] = []
        for child in (children_of.get(cls) or _children_function(cls))(parent):
            parents[child] = parent
            members.append(child)
            kind = type(child)
            if kind not in leaves:
                stack.append((child, members))
            if kind in by_type:
                by_type[kind].append(child)
            else:
                by_type[kind] = [child]
    return TreeIndex(parents, scope_nodes, by_type)


def walk_scope(scope: ast.AST) -> list[ast.AST]:
    """Nodes of a subtree, not descending into nested functions, lambdas or classes (those nodes themselves are
    included). Not in source order."""
    nodes: list[ast.AST] = []
    stack = child_nodes(scope)
    while stack:
        node = stack.pop()
        nodes.append(node)
        if not isinstance(node, SCOPE_NODES):
            stack.extend(child_nodes(node))
    return nodes
