"""One project, one target (issue 29): what the modules that run in the same process as a file say about their Keras,
for a file whose own code says nothing. The modules are those of the project's import graph (mpdoctor.project.
discovery) that import the file, directly or through others (test modules aside), and everything they import: an
entry point that sets TF_USE_LEGACY_KERAS=1 makes every `tf.keras` of that process tf_keras; a sibling that imports
tf_keras, or uses a Keras-3-only API, says which Keras the project is written for. When they disagree, nothing is
decided. Texts are read once per run (the scan's cache) and parsed only where a clue word appears."""

from __future__ import annotations

import ast
import functools
import os
from collections.abc import Callable
from pathlib import Path

from mpdoctor.project import target as targets
from mpdoctor.project.discovery import TEXTS, ImportGraph, closure, find_root, import_graph, is_test_module
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
