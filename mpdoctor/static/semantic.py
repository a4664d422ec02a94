"""The semantic model of one source file: what its names resolve to (imports, canonical API names), its scopes and
assignments, the Keras layers it constructs and defines, and the TensorFlow/Keras it targets (the dtype policy in
force at any point is worked out from it by mpdoctor.static.policies_in_force). Rules ask it through the checker
(mpdoctor.static.context); it knows nothing of rules, diagnostics or edits."""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass, replace

from mpdoctor.facts.keras_semantics import BASE_LAYERS, BASE_MODELS, SAVEDMODEL_LAYERS
from mpdoctor.facts.records import LayerRecord, SourceRef
from mpdoctor.project.environment import KerasVersion
from mpdoctor.project.evidence import ModulesKeras, file_evidence
from mpdoctor.project.target import Overrides, Target, project_for, resolve
from mpdoctor.static.names import ImportMap, canonical
from mpdoctor.static.policy_context import MODULE_SCOPE, FileContexts
from mpdoctor.static.source import SourceLines
from mpdoctor.static.tree_index import FUNCTION_NODES, index_tree, walk_scope

_ASSIGNMENTS = frozenset({ast.Assign, ast.AnnAssign})
_FUNCTION_TYPES = frozenset(FUNCTION_NODES)
_CLASS_TYPES = frozenset({ast.ClassDef})
_POSITION = operator.attrgetter("lineno", "col_offset")  # a node's sort key in source order
_UNRESOLVED = object()  # a node not resolved yet (None is an answer: not an imported name)


@dataclass
class Settings:
    keras_version: int | None = None  # forced by config/CLI
    assumed_policy: str | None = None  # the global policy when the file sets none (set by another module)
    target_tensorflow: str | None = None  # forced by config/CLI: a PEP 440 specifier
    target_origin: str = "--target-tensorflow"  # where target_tensorflow was set
    keras_origin: str = "--keras-version"  # where keras_version was set
    keras_backend: str | None = None  # [tool.mpdoctor] keras-backend: the Keras 3 backend the project runs on
    target: Target | None = None  # resolved by the engine (mpdoctor.project.target); else by the context itself
    project: FileContexts | None = None  # policies other modules of the project call this file's code under
    modules: ModulesKeras | None = None  # the Keras of the modules that run with this file (one project, one target)
    # string constants of the project modules the file imports, by dotted name (mpdoctor.project.running_together)
    imported_constants: dict[str, ast.AST] | None = None

    @property
    def overrides(self) -> Overrides:
        return Overrides(
            self.target_tensorflow, self.target_origin, self.keras_version, self.keras_origin, self.keras_backend
        )

    def alone(self) -> Settings:
        """The same settings for the file checked on its own (without the project's contexts); same target."""
        return replace(self, project=None)


def _in_order(index: dict, keys: tuple) -> list[ast.Call]:
    """The calls of an index (each list in source order) under any of `keys`, in source order."""
    found = [index[key] for key in dict.fromkeys(keys) if key in index]
    if len(found) <= 1:
        return list(found[0]) if found else []
    return sorted((call for calls in found for call in calls), key=_POSITION)


@functools.lru_cache(maxsize=4096)
def is_layer_class(name: str) -> bool:
    """A canonical name of a Keras layer class (or a SavedModel layer): `keras.layers.Dense`, `hub.KerasLayer`.
    Cached: the same few dozen names in every file of a tree."""
    return name in SAVEDMODEL_LAYERS or (name.startswith("keras.layers.") and name.rsplit(".", 1)[-1][:1].isupper())


class SemanticModel:
    """Queries about one parsed file, each answered from one walk of its tree and cached: rules ask the same
    questions of the same nodes, each for its own."""

    def __init__(self, path: str, source: SourceLines, tree: ast.Module, settings: Settings | None = None):
        self.path = path
        self.source = source
        self.tree = tree
        self.settings = settings or Settings()
        self._resolved: dict[ast.AST, str | None] = {}
        self._layer_instances: dict[ast.AST, LayerRecord | None] = {}
        self._layer_records: dict[ast.AST, LayerRecord] = {}
        # One traversal collects everything the queries index by (walking the tree is the dominant cost).
        index = index_tree(tree)
        self.parents: dict[ast.AST, ast.AST] = index.parents  # every node below the module, parents first
        self._scope_nodes = index.scope_nodes
        self._by_type = index.by_type
        self.calls: list[ast.Call] = sorted(self.nodes_of(ast.Call), key=_POSITION)
        import_nodes = self.nodes_of(ast.Import, ast.ImportFrom)
        self.imports = ImportMap(sorted(import_nodes, key=_POSITION))
        self.module_constants = self._module_constants()
        self._scope_assignments: dict[ast.AST, dict[str, list[tuple[int, ast.AST]]]] = {}
        self._self_attributes: dict[ast.AST, dict[str, tuple[int, ast.AST]]] = {}
        self._scope_typed: dict[tuple[ast.AST, frozenset[type]], list[ast.AST]] = {}

    @functools.cached_property
    def nodes(self) -> list[ast.AST]:
        """Every node below the module, parents before children (the order the walk met them)."""
        return list(self.parents)

    def nodes_of(self, *types: type) -> list:
        """Every node of exactly these ast types, from the one traversal (use instead of ast.walk(tree))."""
        if len(types) == 1:
            return self._by_type.get(types[0], [])
        return [node for t in types for node in self._by_type.get(t, ())]

    # ---------------------------------------------------------------- names

    def resolve(self, node: ast.AST) -> str | None:
        result = self._resolved.get(node, _UNRESOLVED)  # not try/except: most nodes are asked once (a miss)
        if result is _UNRESOLVED:
            result = self._resolved[node] = self.imports.resolve(node)
        return result  # type: ignore[return-value]

    def imported_names(self, parts: frozenset[str] | None = None) -> list[tuple[ast.AST, str]]:
        """Every whole Name/Attribute chain rooted in an import (`tf.keras.layers.Dense`, not its inner `tf.keras`)
        with its canonical name, in source order. Found from the Name nodes that are imported aliases, climbing
        to the top of their chain: a rule looking for an API by name need not visit every node. `parts`: only
        the chains with one of these components (in the alias's module or an attribute), found from the aliases
        and the attributes so named rather than from every name of the file."""
        aliases = self.imports.aliases
        if parts is None:
            roots = [root for root in self.nodes_of(ast.Name) if root.id in aliases]
        else:
            named = {local for local, module in aliases.items() if not parts.isdisjoint(module.split("."))}
            roots = [root for root in self.nodes_of(ast.Name) if root.id in named] if named else []
            for attribute in self.nodes_of(ast.Attribute):
                if attribute.attr in parts:
                    root = attribute.value
                    while type(root) is ast.Attribute:
                        root = root.value
                    if type(root) is ast.Name and root.id in aliases:
                        roots.append(root)
        found = {}
        for root in roots:
            top, name = self._imported_chain(root, aliases[root.id])
            found[top] = name
        return sorted(found.items(), key=lambda item: (item[0].lineno, item[0].col_offset))

    def _imported_chain(self, root: ast.Name, module: str) -> tuple[ast.AST, str]:
        """The top of the Name/Attribute chain above `root` (an alias of `module`) and its canonical name."""
        parents = self.parents
        parts = [module]  # the chain's name, built on the way up (what ImportMap.resolve builds downwards)
        node, parent = root, parents.get(root)
        while type(parent) is ast.Attribute and parent.value is node:
            parts.append(parent.attr)
            node, parent = parent, parents.get(parent)
        name = self._resolved.get(node)
        if name is None:
            name = self._resolved[node] = canonical(".".join(parts))
        return node, name

    def call_name(self, call: ast.Call) -> str | None:
        return self.resolve(call.func)

    def calls_named(self, *names: str) -> list[ast.Call]:
        """The calls of these canonical names, in source order."""
        return _in_order(self._calls_by_canonical_name, names)

    def calls_whose_name(self, accept: Callable[[str], bool]) -> list[ast.Call]:
        """The calls whose canonical name `accept`s, in source order (each distinct name asked once)."""
        names = tuple(name for name in self._calls_by_canonical_name if name is not None and accept(name))
        return _in_order(self._calls_by_canonical_name, names)

    def method_calls(self, *methods: str) -> list[ast.Call]:
        """The calls `<anything>.method(...)` of these method names, in source order."""
        return _in_order(self._calls_by_method, methods)

    @functools.cached_property
    def _calls_by_canonical_name(self) -> dict[str | None, list[ast.Call]]:
        # Rules look for a few names among every call of the file, each rule for its own: one pass names them all.
        index: dict[str | None, list[ast.Call]] = {}
        for call in self.calls:
            index.setdefault(self.call_name(call), []).append(call)
        return index

    @functools.cached_property
    def _calls_by_method(self) -> dict[str, list[ast.Call]]:
        index: dict[str, list[ast.Call]] = {}
        for call in self.calls:
            if type(call.func) is ast.Attribute:
                index.setdefault(call.func.attr, []).append(call)
        return index

    def _module_constants(self) -> dict[str, ast.AST]:
        """Module-level names assigned exactly once (`NEG_INF = -1e9`, `POLICY = Policy("mixed_float16")`)."""
        seen: dict[str, list[ast.AST]] = {}
        for stmt in self.tree.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                seen.setdefault(stmt.targets[0].id, []).append(stmt.value)
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
                seen.setdefault(stmt.target.id, []).append(stmt.value)
        own = {name: values[0] for name, values in seen.items() if len(values) == 1}
        return {**(self.settings.imported_constants or {}), **own}  # dotted names never collide with own names

    # ---------------------------------------------------------------- structure

    def enclosing(self, node: ast.AST, kinds: frozenset[type]) -> ast.AST | None:
        """The nearest ancestor of one of these exact ast types (the parser makes no subclasses)."""
        parents = self.parents
        node = parents.get(node)
        while node is not None and type(node) not in kinds:
            node = parents.get(node)
        return node

    def enclosing_function(self, node: ast.AST) -> ast.AST | None:
        return self.enclosing(node, _FUNCTION_TYPES)

    def enclosing_class(self, node: ast.AST) -> ast.ClassDef | None:
        return self.enclosing(node, _CLASS_TYPES)  # type: ignore[return-value]

    def statement_of(self, node: ast.AST) -> ast.stmt:
        while not isinstance(node, ast.stmt):
            node = self.parents[node]
        return node

    def walk_scope(self, scope: ast.AST) -> list[ast.AST]:
        """Nodes of a function, class, lambda or module body, not descending into nested functions, lambdas or
        classes (those nodes themselves are included). Not in source order."""
        nodes = self._scope_nodes.get(scope)
        return walk_scope(scope) if nodes is None else nodes  # any other subtree: walked now

    def scope_nodes_of(self, scope: ast.AST, types: frozenset[type]) -> list[ast.AST]:
        """The nodes of `walk_scope(scope)` of exactly these types, in the same order (computed once per scope and
        set of types): a rule after a few kinds of node skips the others without testing each."""
        key = (scope, types)
        found = self._scope_typed.get(key)
        if found is None:
            found = self._scope_typed[key] = [node for node in self.walk_scope(scope) if type(node) in types]
        return found

    def _assignments(self, scope: ast.AST) -> dict[str, list[tuple[int, ast.AST]]]:
        """name -> [(line, value)] of simple `name = value` assignments in a scope, in source order."""
        found = self._scope_assignments.get(scope)
        if found is None:
            found = {}
            for node in self.scope_nodes_of(scope, _ASSIGNMENTS):
                if node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if isinstance(target, ast.Name):
                            found.setdefault(target.id, []).append((node.lineno, node.value))
            for values in found.values():
                values.sort(key=lambda item: item[0])
            self._scope_assignments[scope] = found
        return found

    def last_assignment(self, name: str, before: ast.AST) -> ast.AST | None:
        """The value last assigned to `name` in the same scope before `before` (straight-line approximation)."""
        scope = self.enclosing_function(before) or self.tree
        best = None
        for line, value in self._assignments(scope).get(name, ()):
            if line >= before.lineno:
                break
            best = value
        return best

    @functools.cached_property
    def classes(self) -> dict[str, ast.ClassDef]:
        return {n.name: n for n in self.nodes_of(ast.ClassDef)}

    def _class_kind(self, cls: ast.ClassDef, depth: int = 0) -> str | None:
        """'model', 'layer' or None, following local base classes."""
        if depth > 10:
            return None
        kinds = set()
        for base in cls.bases:
            name = self.resolve(base)
            if name in BASE_MODELS:
                kinds.add("model")
            elif name in BASE_LAYERS or (name and name.startswith("keras.layers.") and name[13:14].isupper()):
                kinds.add("layer")
            elif isinstance(base, ast.Name) and base.id in self.classes and base.id != cls.name:
                kind = self._class_kind(self.classes[base.id], depth + 1)
                if kind:
                    kinds.add(kind)
        return "model" if "model" in kinds else ("layer" if kinds else None)

    @functools.cached_property
    def _class_kinds(self) -> dict[ast.ClassDef, str | None]:
        return {cls: self._class_kind(cls) for cls in self.classes.values()}

    @functools.cached_property
    def custom_layer_classes(self) -> dict[str, ast.ClassDef]:
        """Local subclasses of keras Layer or Model (a Model is a Layer)."""
        return {name: cls for name, cls in self.classes.items() if self._class_kinds[cls]}

    def is_custom_model(self, cls: ast.ClassDef) -> bool:
        kind = self._class_kinds[cls] if cls in self._class_kinds else self._class_kind(cls)
        return kind == "model"

    @functools.cached_property
    def layer_calls(self) -> list[LayerRecord]:
        """Every layer construction (`layer_call`), in source order, found through the call indexes."""
        calls = self.calls_whose_name(is_layer_class)
        calls += (call for name in self.custom_layer_classes for call in self.calls_to(name))
        ordered = sorted(dict.fromkeys(calls), key=_POSITION)  # a local class may shadow an imported name
        return [layer for layer in map(self.layer_call, ordered) if layer is not None]

    def layer_call(self, call: ast.AST) -> LayerRecord | None:
        if not isinstance(call, ast.Call):
            return None
        name = self.call_name(call)
        if name:
            return self.layer_record(call, name) if is_layer_class(name) else None
        if isinstance(call.func, ast.Name) and call.func.id in self.custom_layer_classes:
            return self.layer_record(call, call.func.id, custom=True)
        return None

    def layer_record(self, call: ast.Call, qualname: str, custom: bool = False) -> LayerRecord:
        """The one record of the construction `call` of the class `qualname` (canonical, or a class of this file
        when `custom`), with its source location."""
        record = self._layer_records.get(call)
        if record is None:
            module, _, class_name = qualname.rpartition(".")
            record = self._layer_records[call] = LayerRecord(
                class_name=class_name,
                module=None if custom else module or None,
                created_at=SourceRef(self.path, call.lineno),
                node=call,
            )
        return record

    def producer(self, expr: ast.AST, depth: int = 0) -> LayerRecord | None:
        """The layer constructor whose call produced tensor `expr` (`Dense(4)(x)`, `head(x)` with
        `head = Dense(4)`, or a name assigned from either)."""
        if depth > 8:
            return None
        if isinstance(expr, ast.Name):
            value = self.last_assignment(expr.id, expr)
            return self.producer(value, depth + 1) if value is not None else None
        if isinstance(expr, ast.Call):
            return self.layer_instance(expr.func, depth + 1)
        return None

    def layer_instance(self, expr: ast.AST, depth: int = 0) -> LayerRecord | None:
        """The constructor call of a layer object (`Dense(4)` itself, or a name / self attribute bound to it)."""
        if depth == 0:
            if expr not in self._layer_instances:
                self._layer_instances[expr] = self._layer_instance(expr, 0)
            return self._layer_instances[expr]
        return self._layer_instance(expr, depth)

    def _layer_instance(self, expr: ast.AST, depth: int) -> LayerRecord | None:
        if depth > 8:
            return None
        direct = self.layer_call(expr)
        if direct:
            return direct
        if isinstance(expr, ast.Name):
            value = self.last_assignment(expr.id, expr)
            return self.layer_instance(value, depth + 1) if value is not None else None
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            value = self.self_attribute(expr, expr.attr)
            return self.layer_instance(value, depth + 1) if value is not None else None
        return None

    def self_attribute(self, at: ast.AST, attr: str) -> ast.AST | None:
        """The value first assigned to `self.<attr>` in the methods of the class enclosing `at`."""
        cls = self.enclosing_class(at)
        if cls is None:
            return None
        attributes = self._self_attributes.get(cls)
        if attributes is None:
            attributes = {}
            for node in ast.walk(cls):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if (
                            isinstance(target, ast.Attribute)
                            and isinstance(target.value, ast.Name)
                            and target.value.id == "self"
                        ):
                            attributes.setdefault(target.attr, (node.lineno, node.value))
                            if node.lineno < attributes[target.attr][0]:
                                attributes[target.attr] = (node.lineno, node.value)
            self._self_attributes[cls] = attributes
        found = attributes.get(attr)
        return found[1] if found else None

    # ---------------------------------------------------------------- target and keras version

    @functools.cached_property
    def target(self) -> Target:
        """The TensorFlow/Keras this file is judged against, and where each part came from
        (mpdoctor.project.target). Rules and fixes read it, never the installed environment."""
        if self.settings.target is None:  # resolved once per file, from this context's one walk of the tree
            evidence = file_evidence(self.tree, self.source.text, self.imports, self.nodes)
            self.settings.target = resolve(
                project_for(self.path), evidence, self.settings.overrides, self.settings.modules
            )
        return self.settings.target

    @property
    def keras_version(self) -> KerasVersion:
        return self.target.keras_version

    @property
    def is_keras3(self) -> bool:
        return self.keras_version.major >= 3

    def qualname(self, scope: ast.AST) -> str:
        """`build`, `Net.call`, `main.<locals>.build`, or MODULE_SCOPE for the module: how the project analysis
        names a scope."""
        if scope is self.tree:
            return MODULE_SCOPE
        parts = [scope.name]  # type: ignore[attr-defined]
        parent = self.parents.get(scope)
        while parent is not None and parent is not self.tree:
            if isinstance(parent, FUNCTION_NODES):
                parts += ["<locals>", parent.name]
            elif isinstance(parent, ast.ClassDef):
                parts.append(parent.name)
            parent = self.parents.get(parent)
        return ".".join(reversed(parts))

    def construction_sites(self, class_name: str) -> list[LayerRecord]:
        names = {class_name} | self._subclasses(class_name)
        if len(names) == 1:
            return self._custom_layer_calls.get(class_name, [])
        return [lc for lc in self.layer_calls if lc.custom and lc.qualname in names]

    def _subclasses(self, class_name: str) -> set[str]:
        return self._direct_subclasses.get(class_name, set())

    # Indexes for the lookups rules repeat once per layer or function: a scan each time is quadratic on big files.

    @functools.cached_property
    def _calls_by_name(self) -> dict[str, list[ast.Call]]:
        index: dict[str, list[ast.Call]] = {}
        for call in self.calls:
            if isinstance(call.func, ast.Name):
                index.setdefault(call.func.id, []).append(call)
        return index

    def calls_to(self, name: str) -> list[ast.Call]:
        """Calls of the plain name `name(...)`, in source order."""
        return self._calls_by_name.get(name, [])

    @functools.cached_property
    def _custom_layer_calls(self) -> dict[str, list[LayerRecord]]:
        index: dict[str, list[LayerRecord]] = {}
        for layer in self.layer_calls:
            if layer.custom:
                index.setdefault(layer.qualname, []).append(layer)
        return index

    @functools.cached_property
    def _direct_subclasses(self) -> dict[str, set[str]]:
        index: dict[str, set[str]] = {}
        for name, cls in self.classes.items():
            for base in cls.bases:
                if isinstance(base, ast.Name):
                    index.setdefault(base.id, set()).add(name)
        return index

    @functools.cached_property
    def float32_spelling(self) -> str:
        """How this file writes the float32 dtype in a `dtype=` argument: `tf.float32`, `keras.float32`... when it
        already does so, else the string `"float32"`."""
        for kw in self.nodes_of(ast.keyword):
            value = kw.value
            if (
                kw.arg == "dtype"
                and isinstance(value, ast.Attribute)
                and value.attr == "float32"
                and isinstance(value.value, (ast.Name, ast.Attribute))
                and self.resolve(value) is not None
            ):
                return self.source.segment(value)
            if kw.arg == "dtype" and isinstance(value, ast.Constant) and value.value == "float32":
                return self.source.segment(value)
        return '"float32"'
