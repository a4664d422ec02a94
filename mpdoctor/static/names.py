"""Resolve the names a file uses to canonical dotted names, whatever spelling it imports them with.

Canonical roots: ``tf`` (tensorflow), ``keras`` (keras 3, ``tf.keras``, ``tf_keras`` alike; the flavour is tracked
separately), ``hub`` (tensorflow_hub), ``np`` (numpy). ``tf.keras.layers.Dense``, ``keras.layers.Dense`` and
``tf_keras.layers.Dense`` all resolve to ``keras.layers.Dense``.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable

# Longest prefix first; applied once to the fully qualified import path.
_CANONICAL_PREFIXES = (
    ("tensorflow.python.keras", "keras"),
    ("tensorflow.compat.v2.keras", "keras"),
    ("tensorflow.compat.v1.keras", "keras"),
    ("tensorflow.compat.v2", "tf"),
    ("tensorflow.keras", "keras"),
    ("tensorflow_hub", "hub"),
    ("tensorflow", "tf"),
    ("tf_keras.src", "keras"),
    ("tf_keras", "keras"),
    ("keras.api._v2.keras", "keras"),
    ("keras.src", "keras"),
    ("keras._tf_keras.keras", "keras"),
    ("numpy", "np"),
)

# Which import roots say which Keras: `tf_keras` is Keras 2; `keras` is Keras 3 on any current install;
# `tensorflow.keras` depends on the TensorFlow version and TF_USE_LEGACY_KERAS.
FLAVOUR_TF_KERAS = "tf.keras"
FLAVOUR_KERAS2 = "tf_keras"
FLAVOUR_KERAS3 = "keras"


@functools.lru_cache(maxsize=16384)  # the same few hundred API names in every file of a tree
def canonical(dotted: str) -> str:
    for prefix, replacement in _CANONICAL_PREFIXES:
        if dotted == prefix or dotted.startswith(prefix + "."):
            return replacement + dotted[len(prefix) :]
    return dotted


def _flavour_of(module: str) -> str | None:
    root = module.split(".")[0]
    if root == "tf_keras":
        return FLAVOUR_KERAS2
    if root == "keras":
        return FLAVOUR_KERAS3
    if module.startswith(("tensorflow.keras", "tensorflow.python.keras", "tensorflow.compat")):
        return FLAVOUR_TF_KERAS
    if root == "tensorflow":
        return FLAVOUR_TF_KERAS  # `tf.keras.*` may follow
    return None


class ImportMap:
    """Local name -> fully qualified (non-canonical) dotted path, from every import in the file."""

    def __init__(self, import_nodes: Iterable[ast.AST]) -> None:
        self.aliases: dict[str, str] = {}
        self.flavours: set[str] = set()
        self.modules: set[str] = set()
        for node in import_nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.modules.add(alias.name)
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        root = alias.name.split(".")[0]
                        self.aliases.setdefault(root, root)
                    self._note_flavour(alias.name)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                self.modules.add(node.module)
                self._note_flavour(node.module)
                for alias in node.names:
                    if alias.name == "*":
                        continue
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def _note_flavour(self, module: str) -> None:
        flavour = _flavour_of(module)
        if flavour:
            self.flavours.add(flavour)

    def resolve(self, node: ast.AST) -> str | None:
        """Canonical dotted name of a Name/Attribute chain rooted in an import, else None."""
        if type(node) is ast.Name:  # the parser makes no subclasses; most names resolved are plain
            module = self.aliases.get(node.id)
            return None if module is None else canonical(module)
        parts: list[str] = []
        while type(node) is ast.Attribute:
            parts.append(node.attr)  # type: ignore[attr-defined]
            node = node.value  # type: ignore[attr-defined]
        module = self.aliases.get(node.id) if type(node) is ast.Name else None  # type: ignore[attr-defined]
        if module is None:
            return None
        parts.append(module)
        parts.reverse()
        return canonical(".".join(parts))


def dotted_name(node: ast.AST) -> str | None:
    """`a.b.c` for a Name/Attribute chain regardless of imports (e.g. `self.head`)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None
