"""What the modules of a file's project say that its own code does not (issue 29).

One project, one target: what the modules that run in the same process as a file say about their Keras,
for a file whose own code says nothing. The modules are those of the project's import graph (mpdoctor.project.
discovery) that import the file, directly or through others (test modules aside), and everything they import: an
entry point that sets TF_USE_LEGACY_KERAS=1 makes every `tf.keras` of that process tf_keras; a sibling that imports
tf_keras, or uses a Keras-3-only API, says which Keras the project is written for. When they disagree, nothing is
decided. Texts are read once per run (the scan's cache) and parsed only where a clue word appears.

Module constants: the string constants of the project modules a file imports (`FLOAT_A100 = "bfloat16"` in a
package's `__init__`), keyed by the dotted name the file's imports give them (`benchmark.FLOAT_A100`), so that a
policy set to `benchmark.FLOAT_A100` is known (mpdoctor.static.policies)."""

from __future__ import annotations

import ast
import functools
import os
from collections.abc import Callable
from pathlib import Path

from mpdoctor.project import target as targets
from mpdoctor.project.discovery import (
    TEXTS,
    ImportGraph,
    ModuleResolver,
    closure,
    find_root,
    import_graph,
    imports_of,
    is_test_module,
)
from mpdoctor.project.evidence import ModulesKeras, file_evidence
from mpdoctor.sources import read_source

# A module without one of these words chooses no Keras (file_evidence then finds nothing to say).
_WORDS = ("tf_keras", "TF_USE_LEGACY_KERAS", "ops", "set_dtype_policy", "DTypePolicy", "dtype_policies", "TFSMLayer")
_MAX_MODULES = 400  # modules read for one file: beyond, a library's whole tree, not a program


def modules_keras(path: str | None, excluded: Callable[[str], bool]) -> ModulesKeras | None:
    """The Keras chosen by the modules that run with the file at `path`, or None (not in a project, no choice, or
    a disagreement)."""
    if path is None:
        return None
    generation = targets.generation()
    real = os.path.realpath(path)
    root = _root(os.path.dirname(real), generation)
    if root is None:
        return None
    key = (real, generation)
    if key not in _CHOICES:  # asked twice per file (the cache key, the check)
        if len(_CHOICES) > 8192:
            _CHOICES.clear()
        graph = import_graph(root, excluded, generation)
        _CHOICES[key] = _choice(root, real, graph, generation) if graph is not None and real in graph.graph else None
    return _CHOICES[key]


_CHOICES: dict[tuple[str, int], ModulesKeras | None] = {}


@functools.lru_cache(maxsize=4096)
def _root(directory: str, generation: int) -> str | None:
    try:
        root = find_root(Path(directory) / "__file__.py")
    except (OSError, RuntimeError):
        return None
    return None if root is None else str(root)


def _choice(root: str, path: str, graph: ImportGraph, generation: int) -> ModulesKeras | None:
    importers = closure([path], graph.reverse)
    if not is_test_module(path, root):
        importers = {p for p in importers if not is_test_module(p, root)}
    if importers == {path}:
        return None  # nothing imports it: a script of its own, whose code alone says what it is written for
    together = closure(importers, graph.graph) - {path}
    if len(together) > _MAX_MODULES:
        return None
    keras2: list[tuple[str, str]] = []
    keras3: list[str] = []
    for module in sorted(together):
        found = _module_choice(module, root, module in importers, generation)
        if found is None:
            continue
        if found[0] == 3:
            keras3.append(found[1])
        else:
            keras2.append((found[1], found[2]))
    if bool(keras2) == bool(keras3):  # both (a disagreement) or neither
        return None
    if keras3:
        return ModulesKeras(3, keras3[0])
    legacy = [origin for origin, how in keras2 if how == "legacy"]
    return ModulesKeras(2, legacy[0] if legacy else keras2[0][0], legacy=bool(legacy))


@functools.lru_cache(maxsize=8192)
def _module_choice(module: str, root: str, imports_it: bool, generation: int) -> tuple[int, str, str] | None:
    """(major, why, how) of one module's own choice of Keras, or None."""
    text = TEXTS.get(module)
    if text is None:
        try:
            text = read_source(module)
        except (OSError, UnicodeDecodeError, SyntaxError):
            return None
    if not any(word in text for word in _WORDS):
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    evidence = file_evidence(tree, text)
    shown = os.path.relpath(module, root)
    relation = "which imports this module" if imports_it else "run with this module"
    if evidence.flavour == "tf_keras":
        how = "legacy" if evidence.selection.endswith("TF_USE_LEGACY_KERAS=1") else "import"
        return 2, f"{shown}, {relation}, {evidence.selection.removeprefix('this file ')}", how
    keras3 = evidence.of("keras3")
    if keras3 and evidence.flavour != "keras":  # `import keras` is Keras 3 on its own: not a choice for tf.keras
        return 3, f"{shown}, {relation}, uses {keras3[0].what} (Keras 3 only)", "keras3"
    return None


# ----------------------------------------------------------------------------------------- module constants


def imported_constants(path: str | None, text: str, excluded: Callable[[str], bool]) -> dict[str, ast.AST]:
    """`{"benchmark.FLOAT_A100": <the constant's value>}` for the module-level string constants of the project
    modules the file at `path` (of text `text`) imports by absolute name."""
    if path is None or "import" not in text:
        return {}
    generation = targets.generation()
    real = os.path.realpath(path)
    root = _root(os.path.dirname(real), generation)
    if root is None:
        return {}
    graph = import_graph(root, excluded, generation)
    if graph is None:
        return {}
    resolver = _resolver(root, graph, generation)
    imports = imports_of(text)
    found: dict[str, ast.AST] = {}
    named = [(module, names) for dots, module, names in imports.froms if dots == 0 and module]
    named += [(module, ()) for module in imports.plain]
    for module, names in named:
        target = resolver.module(real, 0, module)
        if target is None:
            continue
        for prefix, file in [(module, target), *_submodules(resolver, target, module, names)]:
            if file.endswith(".py") and file != real:
                found.update((f"{prefix}.{name}", value) for name, value in _string_constants(file, generation))
    return found


def _submodules(resolver: ModuleResolver, target: str, module: str, names) -> list[tuple[str, str]]:
    package = resolver.package_of(target)
    if package is None:
        return []
    found = []
    for name in names:
        sub = resolver.child(package, name) if name != "*" else None
        if sub is not None:
            found.append((f"{module}.{name}", sub))
    return found


_RESOLVERS: dict[tuple[str, int], ModuleResolver] = {}


def _resolver(root: str, graph: ImportGraph, generation: int) -> ModuleResolver:
    key = (root, generation)
    if key not in _RESOLVERS:
        if len(_RESOLVERS) > 16:
            _RESOLVERS.clear()
        _RESOLVERS[key] = ModuleResolver(root, graph.files)
    return _RESOLVERS[key]


@functools.lru_cache(maxsize=4096)
def _string_constants(module: str, generation: int) -> tuple[tuple[str, ast.AST], ...]:
    """(name, value) of the module-level names assigned exactly once, to a string."""
    text = TEXTS.get(module)
    try:
        text = text if text is not None else read_source(module)
        tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    seen: dict[str, list[ast.AST]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            seen.setdefault(stmt.targets[0].id, []).append(stmt.value)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            seen.setdefault(stmt.target.id, []).append(stmt.value)
    return tuple(
        (name, values[0])
        for name, values in seen.items()
        if len(values) == 1 and isinstance(values[0], ast.Constant) and isinstance(values[0].value, str)
    )
