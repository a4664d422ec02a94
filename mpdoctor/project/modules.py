"""The project's modules as the project analysis reads them: each module's top-level definitions, imports and
constants, the command-line flags it defines (absl, argparse), parsed when the walk first needs the module."""

from __future__ import annotations

import ast
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mpdoctor.notebook import NotebookError, is_notebook, read_notebook
from mpdoctor.project.discovery import TEXTS, ModuleResolver
from mpdoctor.sources import read_source
from mpdoctor.static.astutil import keyword_value
from mpdoctor.static.names import ImportMap
from mpdoctor.static.policy_context import Step

_FLAG_ROOTS = ("FLAGS", "flags", "flags_obj", "args", "opt", "opts", "options", "cfg", "config", "params", "hparams")
_ABSL_DEFINES = ("DEFINE_string", "DEFINE_enum", "DEFINE_bool", "DEFINE_boolean", "DEFINE_integer", "DEFINE_float")


@dataclass(eq=False)
class FunctionInfo:
    module: ModuleInfo
    node: ast.FunctionDef | ast.AsyncFunctionDef
    qualname: str
    cls: ClassInfo | None = None  # for methods

    @property
    def params(self) -> list[str]:
        args = self.node.args
        return [a.arg for a in (*args.posonlyargs, *args.args)]

    @property
    def keyword_params(self) -> list[str]:
        return [a.arg for a in self.node.args.kwonlyargs]

    def __hash__(self) -> int:
        return id(self)


@dataclass(eq=False)
class ClassInfo:
    module: ModuleInfo
    node: ast.ClassDef
    qualname: str
    methods: dict[str, FunctionInfo] = field(default_factory=dict)

    def __hash__(self) -> int:
        return id(self)


class ModuleInfo:
    """One parsed module: its top-level definitions, imports and module constants (what names resolve to)."""

    def __init__(
        self, path: str, shown: str, text: str, tree: ast.Module, cells: tuple[tuple[int, int], ...] = ()
    ) -> None:
        self.path = path
        self.shown = shown
        self.text = text
        self.tree = tree
        self.cells = cells  # a notebook's: line of its joined code - 1 -> (cell, line in the cell)
        self.defs: dict[str, FunctionInfo | ClassInfo] = {}
        self.assigned: dict[str, list[ast.AST]] = {}
        self.import_nodes: list[ast.Import | ast.ImportFrom] = []
        self.flag_defs: list[ast.Call] = []
        self._index(tree.body, prefix="")
        self.imports = ImportMap(self.import_nodes)
        self.bindings = import_bindings(self.import_nodes)

    def step(self, line: int, what: str) -> Step:
        """A place in this module on a context's path (`nb.ipynb cell 3:2` in a notebook)."""
        if self.cells and 0 < line <= len(self.cells):
            cell, line = self.cells[line - 1]
            return Step(f"{self.shown} cell {cell}", line, what)
        return Step(self.shown, line, what)

    def _index(self, body: list[ast.stmt], prefix: str) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.defs[stmt.name] = FunctionInfo(self, stmt, prefix + stmt.name)
            elif isinstance(stmt, ast.ClassDef):
                info = ClassInfo(self, stmt, prefix + stmt.name)
                for item in stmt.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        info.methods[item.name] = FunctionInfo(self, item, f"{info.qualname}.{item.name}", info)
                self.defs[stmt.name] = info
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self.import_nodes.append(stmt)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        self.assigned.setdefault(target.id, []).append(stmt.value)
            elif isinstance(stmt, (ast.If, ast.Try, ast.With)):
                for block in _blocks(stmt):
                    self._index(block, prefix)


def import_bindings(nodes) -> dict[str, tuple[ast.Import | ast.ImportFrom, ast.alias]]:
    """Local name -> the import (and its alias) that binds it, the last one winning (relative imports included)."""
    found = {}
    for node in nodes:
        for alias in node.names:
            if alias.name == "*":
                continue
            if isinstance(node, ast.Import):
                found[alias.asname or alias.name.split(".")[0]] = (node, alias)
            else:
                found[alias.asname or alias.name] = (node, alias)
    return found


def _blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    if isinstance(stmt, ast.If):
        return [stmt.body, stmt.orelse]
    if isinstance(stmt, ast.Try):
        return [stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody]
    if isinstance(stmt, ast.With):
        return [stmt.body]
    return []


@dataclass
class FlagInfo:
    option: str  # `--amp`
    default: ast.AST | None
    choices: list[ast.AST] | None
    boolean: bool


def _literal_list(node: ast.AST | None) -> list[ast.AST] | None:
    return list(node.elts) if isinstance(node, (ast.List, ast.Tuple, ast.Set)) else None


def _flag_definitions(module: ModuleInfo) -> dict[str, FlagInfo]:
    """absl `flags.DEFINE_*` and argparse `add_argument` calls anywhere in the module: dest -> FlagInfo."""
    found: dict[str, FlagInfo] = {}
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr in _ABSL_DEFINES:
            flag = _absl_flag(node, node.func.attr)
        elif node.func.attr == "add_argument":
            flag = _argparse_flag(node)
        else:
            continue
        if flag is not None:
            found[flag[0]] = flag[1]
    return found


def _absl_flag(node: ast.Call, define: str) -> tuple[str, FlagInfo] | None:
    name = node.args[0] if node.args else keyword_value(node, "name")
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return None
    default = node.args[1] if len(node.args) > 1 else keyword_value(node, "default")
    choices = _literal_list(node.args[2] if len(node.args) > 2 and define == "DEFINE_enum" else None)
    choices = choices or _literal_list(keyword_value(node, "enum_values"))
    return name.value, FlagInfo(f"--{name.value}", default, choices, define.startswith("DEFINE_bool"))


def _argparse_flag(node: ast.Call) -> tuple[str, FlagInfo] | None:
    options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    long = [o for o in options if o.startswith("--")] or [o for o in options if o.startswith("-")]
    dest = keyword_value(node, "dest")
    if isinstance(dest, ast.Constant) and isinstance(dest.value, str):
        name = dest.value
    elif long:
        name = long[0].lstrip("-").replace("-", "_")
    elif options:
        name = options[0]  # a positional argument
    else:
        return None
    action = keyword_value(node, "action")
    boolean = isinstance(action, ast.Constant) and action.value in ("store_true", "store_false")
    flag = FlagInfo(
        long[0] if long else name,
        keyword_value(node, "default"),
        _literal_list(keyword_value(node, "choices")),
        boolean,
    )
    return name, flag


def flag_like(node: ast.AST) -> bool:
    """`FLAGS.x`, `args.x`, `self.args.x`, `flags.FLAGS.x`: an object that holds command-line options."""
    while isinstance(node, ast.Attribute):
        if node.attr in _FLAG_ROOTS:
            return True
        node = node.value
    return isinstance(node, ast.Name) and (node.id in _FLAG_ROOTS or node.id.endswith(("args", "flags", "FLAGS")))


def parse(text: str, filename: str) -> ast.Module | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(text, filename=filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


class ModuleLoader:
    """The project's modules, parsed when the walk first needs one (most of a big tree never is). Keeps the sources
    of the checked files it parses (the per-file pass reuses them) and the flags of the modules that define some."""

    def __init__(
        self,
        resolver: ModuleResolver,
        flag_files: set[str],
        shown: Callable[[str], str],
        checked: set[str],
        notes: list[str],
    ) -> None:
        self.resolver = resolver
        self.flag_files = flag_files
        self.shown = shown
        self.checked = checked
        self.notes = notes
        self.sources: dict[str, tuple[str, ast.Module]] = {}  # what the per-file pass may reuse
        self.flags: dict[str, FlagInfo] = {}
        self.loaded: dict[str, ModuleInfo | None] = {}

    def get(self, path: str) -> ModuleInfo | None:
        if path in self.loaded:
            return self.loaded[path]
        module = None
        if path in self.resolver.files:
            text = TEXTS.pop(path, None)  # read by this run's scan already
            cells: tuple[tuple[int, int], ...] = ()
            try:
                if is_notebook(path):  # an entry point: its code cells, run in order
                    notebook = read_notebook(Path(path))
                    text, cells = notebook.source, notebook.line_map
                else:
                    text = text if text is not None else read_source(Path(path))
            except (OSError, UnicodeDecodeError, SyntaxError, NotebookError):
                text = None
            tree = parse(text, self.shown(path)) if text is not None else None
            if tree is None and text is not None:
                self.notes.append(f"{self.shown(path)}: does not parse: the project analysis goes around it")
            if tree is not None:
                module = ModuleInfo(path, self.shown(path), text, tree, cells)
                if path in self.checked:
                    self.sources[path] = (text, tree)
                if path in self.flag_files:
                    self.flags.update(_flag_definitions(module))
        self.loaded[path] = module
        return module

    def __contains__(self, path: str) -> bool:
        return self.get(path) is not None

    def __getitem__(self, path: str) -> ModuleInfo:
        module = self.get(path)
        if module is None:
            raise KeyError(path)
        return module
