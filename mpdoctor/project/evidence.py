"""What a file itself says about the TensorFlow and Keras it is written for (source 3 of its target,
mpdoctor.project.target): the Keras it imports (tf_keras, keras, tf.keras), TF_USE_LEGACY_KERAS set in it, and APIs
that exist only in Keras 2, only in Keras 3 or only in TensorFlow 1 (its clues). Read from the AST, never run.

A clue that is an API some rule reports on the other target (`get_scaled_loss` on Keras 3, the removed
`mixed_precision.experimental`, `tf.contrib.mixed_precision` on TensorFlow 2) is `flagged`: it is never evidence,
or the bug the rule exists to catch would choose the target that silences it (issue 29). It only says what the file
looks written for (MP003's note)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from mpdoctor.facts.keras_semantics import file_legacy_keras_setting
from mpdoctor.project.backend import FileBackend, file_backend
from mpdoctor.spellings import Spellings
from mpdoctor.static.names import FLAVOUR_KERAS2, FLAVOUR_KERAS3, ImportMap

FLAVOUR_TF_KERAS_MODULE = "tf.keras"  # `tf.keras` / `tensorflow.keras`: its Keras depends on the TF release


@dataclass(frozen=True)
class Clue:
    """One API of the file that exists only in one Keras or one TensorFlow major."""

    kind: str  # "keras2" | "keras3" | "tf1"
    what: str  # the API as the message names it: "get_scaled_loss", "keras.ops", "tf.contrib"
    line: int
    flagged: bool = False  # a rule reports this API on the other target: not evidence (module docstring)

    @property
    def text(self) -> str:
        if self.what.startswith("tf.compat.v1."):
            return f"TF1 graph code (`{self.what}`, line {self.line}), from the Keras 2 era"
        only = {"keras2": "Keras 2", "keras3": "Keras 3", "tf1": "TensorFlow 1"}[self.kind]
        return f"`{self.what}` (line {self.line}), which exists only in {only}"


@dataclass(frozen=True)
class FileEvidence:
    flavour: str  # "tf_keras" (the file chose Keras 2), "keras" (the keras package), "tf.keras"
    selection: str  # why, for the tf_keras flavour: "this file imports tf_keras"
    clues: tuple[Clue, ...] = ()
    imports_hub: bool = False
    imports_tensorflow: bool = False  # so its `tf.keras` is whatever Keras the process has
    backend: FileBackend = field(default_factory=FileBackend)  # KERAS_BACKEND set in it, backends it imports

    def of(self, kind: str) -> list[Clue]:
        """The evidence of `kind`: clues that are no flagged API."""
        return [c for c in self.clues if c.kind == kind and not c.flagged]

    def flagged(self, kind: str) -> list[Clue]:
        """Flagged APIs of `kind`: what the file looks written for, never evidence for it."""
        return [c for c in self.clues if c.kind == kind and c.flagged]


# Keras 3 only: canonical prefixes (mpdoctor.static.names) and method names called on any object.
_KERAS3_NAMES = (
    "keras.ops",
    "keras.config.set_dtype_policy",
    "keras.DTypePolicy",
    "keras.dtype_policies",
    "keras.layers.TFSMLayer",
    "keras.random.SeedGenerator",
)
_KERAS3_METHODS = ("scale_loss",)
_KERAS2_NAMES = ("keras.mixed_precision.experimental",)
_KERAS2_METHODS = ("get_scaled_loss", "get_unscaled_gradients")
_TF1_FLAGGED = "tf.contrib.mixed_precision"
# TF1 graph code through the compatibility module: written for the Keras 2 era.
_TF1_GRAPH_CALLS = ("Session", "placeholder", "disable_eager_execution", "disable_v2_behavior", "get_variable")
# Names TensorFlow 2 no longer has outside tf.compat.v1.
_TF1_ONLY = (
    "tf.contrib",
    "tf.Session",
    "tf.placeholder",
    "tf.get_variable",
    "tf.variable_scope",
    "tf.global_variables_initializer",
    "tf.train.AdamOptimizer",
    "tf.train.GradientDescentOptimizer",
    "tf.train.MomentumOptimizer",
)
# A file without any of these spellings has no clue: the walk of its whole tree is skipped. Every clue's name is
# made of identifiers the file spells (imports only rename the roots: mpdoctor.static.names), so each clue has a
# word here: `experimental` for keras.mixed_precision.experimental (not `mixed_precision`, which every file that
# sets a policy has), the optimizer's own name for tf.train.AdamOptimizer (also when imported from tf.train).
_CLUE_TEXT = Spellings(
    r"get_scaled_loss|get_unscaled_gradients|scale_loss|experimental|\bops\b|set_dtype_policy|DTypePolicy|"
    r"dtype_policies|TFSMLayer|SeedGenerator|compat|contrib|Session|placeholder|get_variable|variable_scope|"
    r"global_variables_initializer|AdamOptimizer|GradientDescentOptimizer|MomentumOptimizer"
)
# Imports below the module's top-level statements (in a function): only then are imports looked for everywhere.
_NESTED_IMPORT = re.compile(r"^[ \t]+(?:import|from)\s", re.MULTILINE)


def file_evidence(tree: ast.AST, text: str, imports: ImportMap | None = None, nodes: Iterable[ast.AST] | None = None):
    """What the file itself says about its Keras and TensorFlow. `imports`/`nodes`: a StaticContext's, to save a
    walk of the tree; without them the tree is walked only when the text may hold a clue."""
    legacy = file_legacy_keras_setting(tree) if "TF_USE_LEGACY_KERAS" in text else None
    if nodes is not None:
        nodes = list(nodes)
    elif _CLUE_TEXT.found_in(text) or (_NESTED_IMPORT.search(text) and ("keras" in text or "hub" in text)):
        nodes = list(ast.walk(tree))
    else:
        nodes = _top_level_imports(tree)
    if imports is None:
        imports = ImportMap(
            sorted(
                (n for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom))),
                key=lambda n: (n.lineno, n.col_offset),
            )
        )
    if FLAVOUR_KERAS2 in imports.flavours:
        flavour, selection = "tf_keras", "this file imports tf_keras"
    elif legacy is not None:
        flavour, selection = "tf_keras", "this file sets TF_USE_LEGACY_KERAS=1"
    elif FLAVOUR_KERAS3 in imports.flavours:
        flavour, selection = "keras", "this file imports keras"
    else:
        flavour, selection = FLAVOUR_TF_KERAS_MODULE, ""
    clues: dict[tuple[str, str], Clue] = {}
    if _CLUE_TEXT.found_in(text):
        found = list(_clues(nodes, imports))
        if found:  # an API in a shim runs on one target only: it says nothing of the file's target, either way
            shims = shim_lines(n for n in nodes if isinstance(n, (ast.Try, ast.If)))
            found = [c for c in found if c.line not in shims]
        for clue in found:  # the first line of each API (the walk is breadth first, not in line order)
            seen = clues.get((clue.kind, clue.what))
            if seen is None or clue.line < seen.line:
                clues[(clue.kind, clue.what)] = clue
    hub = any(m == "tensorflow_hub" or m.startswith("tensorflow_hub.") for m in imports.modules)
    tensorflow = FLAVOUR_TF_KERAS_MODULE in imports.flavours
    backend_nodes = ast.walk(tree) if "KERAS_BACKEND" in text else ()
    backend = file_backend(backend_nodes, imports.modules, tensorflow)
    ordered = tuple(sorted(clues.values(), key=lambda c: c.line))
    return FileEvidence(flavour, selection, ordered, hub, tensorflow, backend)


def _top_level_imports(tree: ast.AST) -> list[ast.AST]:
    """Import statements of the module body, also inside top-level `if`/`try`/`with` blocks (not functions)."""
    found: list[ast.AST] = []
    stack = list(getattr(tree, "body", []))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                stack.extend(getattr(node, field, []) or [])
        elif isinstance(node, ast.ExceptHandler):
            stack.extend(node.body)
    return found


def _clues(nodes: list[ast.AST], imports: ImportMap) -> Iterable[Clue]:
    parents = {}
    for node in nodes:
        if isinstance(node, ast.Attribute):
            parents[id(node.value)] = node
    for node in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _KERAS2_METHODS:  # MP103 on Keras 3
                yield Clue("keras2", node.func.attr, node.lineno, flagged=True)
            elif node.func.attr in _KERAS3_METHODS:
                yield Clue("keras3", node.func.attr, node.lineno)
        if isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in parents:  # whole chains only
            name = imports.resolve(node)
            if name:
                yield from _name_clues(name, node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            from mpdoctor.static.names import canonical

            for alias in node.names:
                yield from _name_clues(canonical(f"{node.module}.{alias.name}"), node.lineno)


def _name_clues(name: str, line: int) -> Iterable[Clue]:
    for prefix in _KERAS3_NAMES:
        if name == prefix or name.startswith(prefix + "."):
            yield Clue("keras3", prefix, line)
    for prefix in _KERAS2_NAMES:
        if name == prefix or name.startswith(prefix + "."):
            yield Clue("keras2", "mixed_precision.experimental", line, flagged=True)  # MP103: removed in TF 2.9
    for prefix in _TF1_ONLY:
        if name == _TF1_FLAGGED or name.startswith(_TF1_FLAGGED + "."):  # MP103 on TensorFlow 2
            yield Clue("tf1", _TF1_FLAGGED, line, flagged=True)
        elif name == prefix or name.startswith(prefix + "."):
            yield Clue("tf1", prefix, line)
    if name.startswith("tf.compat.v1.") and name.rsplit(".", 1)[-1] in _TF1_GRAPH_CALLS:
        yield Clue("keras2", name, line)


# ------------------------------------------------------------------------------------------ compatibility shims

_GUARD_EXCEPTIONS = {"ImportError", "ModuleNotFoundError", "AttributeError", "Exception", "BaseException"}


def shim_lines(nodes: Iterable[ast.AST]) -> set[int]:
    """Lines of compatibility shims among `nodes` (the `try`/`if` nodes of a file suffice): a `try` body whose
    handler catches ImportError/AttributeError, or an `if` arm chosen by a version / `hasattr` test
    (`if tf.__version__ < "2.4":`). Code there runs on one target and is skipped on the other: MP103 does not report
    it, and it says nothing of the target the file was written for."""
    lines: set[int] = set()
    for node in nodes:
        blocks: list[list[ast.stmt]] = []
        if isinstance(node, ast.Try) and any(_catches_missing_api(h) for h in node.handlers):
            blocks.append(node.body)
        elif isinstance(node, ast.If) and _is_version_test(node.test):
            blocks += [node.body, node.orelse]
        for block in blocks:
            for stmt in block:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def _catches_missing_api(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((t.attr if isinstance(t, ast.Attribute) else getattr(t, "id", "")) in _GUARD_EXCEPTIONS for t in types)


def _is_version_test(test: ast.AST) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Attribute) and node.attr in ("__version__", "VERSION", "version"):
            return True
        if isinstance(node, ast.Name) and "version" in node.id.lower():
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr":
            return True
    return False


# ------------------------------------------------------------------------------------- the modules run with it


@dataclass(frozen=True)
class ModulesKeras:
    """The Keras the project's modules that run with a file choose (mpdoctor.project.running_together): an entry
    point that imports it sets TF_USE_LEGACY_KERAS=1 (its `tf.keras` is then tf_keras), or those modules import
    tf_keras or use Keras-3-only APIs. One project, one target: it decides a file whose own code says nothing."""

    major: int  # 2 | 3
    origin: str  # "train.py, which imports this module, sets TF_USE_LEGACY_KERAS=1"
    legacy: bool = False  # the choice is TF_USE_LEGACY_KERAS=1 (tf.keras is tf_keras on every release)
