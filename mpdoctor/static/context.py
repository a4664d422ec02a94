"""The checker the static rules get for one file (as ruff's Checker): it owns the file's semantic model
(mpdoctor.static.semantic) and the policies in force in it (mpdoctor.static.policies_in_force) and answers their
queries itself, turns a finding at a node into a Diagnostic, builds the edits of fixes (mpdoctor.static.edits), and
keeps the rules' per-file caches."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from mpdoctor.diagnostics import Confidence, Diagnostic, Edit, Fix, Location
from mpdoctor.facts.dtypes import is_float16_compute
from mpdoctor.facts.records import LayerRecord, PolicyEvent
from mpdoctor.project.environment import KerasVersion
from mpdoctor.project.target import Target
from mpdoctor.registry import get_rule
from mpdoctor.static import edits
from mpdoctor.static.policies_in_force import PoliciesInForce
from mpdoctor.static.semantic import SemanticModel, Settings
from mpdoctor.static.source import SourceLines


def policy_confidence(policies: Iterable[str | None]) -> Confidence:
    """HIGH when every policy the node may run under is float16, MEDIUM when some run may be float32."""
    return Confidence.HIGH if all(is_float16_compute(p) for p in policies) else Confidence.MEDIUM


class StaticContext:
    """What a static rule checks one file through. The semantic queries are the model's own bound methods and
    attributes (no call in between: rules make them by the hundred thousand on a big tree); those the model
    works out on first use are properties."""

    def __init__(self, path: str, display_path: str, text: str, tree: ast.Module, settings: Settings | None = None):
        self.source = source = SourceLines(display_path, text)
        self.semantic = model = SemanticModel(path, source, tree, settings)
        self.policies = policies = PoliciesInForce(model)
        self._memos: dict[str, dict] = {}
        # The file and its text.
        self.path, self.tree, self.settings = model.path, model.tree, model.settings
        self.display_path, self.text, self.lines = source.display_path, source.text, source.lines
        self.segment, self.column = source.segment, source.column
        # Names and the calls that use them.
        self.imports, self.module_constants, self.calls = model.imports, model.module_constants, model.calls
        self.resolve, self.call_name, self.imported_names = model.resolve, model.call_name, model.imported_names
        self.calls_named, self.calls_whose_name = model.calls_named, model.calls_whose_name
        self.method_calls, self.calls_to = model.method_calls, model.calls_to
        # Structure: parents, scopes, assignments.
        self.parents, self.nodes_of, self.qualname = model.parents, model.nodes_of, model.qualname
        self.enclosing, self.enclosing_function = model.enclosing, model.enclosing_function
        self.enclosing_class, self.statement_of = model.enclosing_class, model.statement_of
        self.walk_scope, self.scope_nodes_of = model.walk_scope, model.scope_nodes_of
        self.last_assignment, self.self_attribute = model.last_assignment, model.self_attribute
        # Layers: constructions, custom classes, what produced a tensor.
        self.layer_call, self.layer_record = model.layer_call, model.layer_record
        self.is_custom_model, self.construction_sites = model.is_custom_model, model.construction_sites
        self.producer, self.layer_instance = model.producer, model.layer_instance
        # Policies in force.
        self.policies_at, self.layer_policies = policies.policies_at, policies.layer_policies
        self.class_policies, self.float16_policy = policies.class_policies, policies.float16_policy

    # ---------------------------------------------------------------- what the model works out on first use

    @property
    def nodes(self) -> list[ast.AST]:
        return self.semantic.nodes

    @property
    def classes(self) -> dict[str, ast.ClassDef]:
        return self.semantic.classes

    @property
    def custom_layer_classes(self) -> dict[str, ast.ClassDef]:
        return self.semantic.custom_layer_classes

    @property
    def layer_calls(self) -> list[LayerRecord]:
        return self.semantic.layer_calls

    @property
    def target(self) -> Target:
        return self.semantic.target

    @property
    def keras_version(self) -> KerasVersion:
        return self.semantic.keras_version

    @property
    def is_keras3(self) -> bool:
        return self.semantic.is_keras3

    @property
    def policy_events(self) -> list[PolicyEvent]:
        return self.policies.policy_events

    @property
    def file_policies(self) -> frozenset[str | None]:
        return self.policies.file_policies

    @property
    def any_float16_policy(self) -> bool:
        return self.policies.any_float16_policy

    @property
    def float32_spelling(self) -> str:
        return self.semantic.float32_spelling

    # ---------------------------------------------------------------- the rules' caches

    def memo(self, name: str) -> dict:
        """A per-file cache for a rule; it dies with the context (a module-level WeakKeyDictionary whose values
        refer back to the context would keep every checked file's context alive)."""
        return self._memos.setdefault(name, {})

    def release(self) -> None:
        """Drop the rules' per-file caches once every check has run. Their values (dataflow's Flow, for one) refer
        back to the context, so without this the context and the whole syntax tree are a reference cycle that only
        the garbage collector frees: on a 2,000-file run it examined every file's tree, a sixth of the CPU time."""
        self._memos.clear()

    # ---------------------------------------------------------------- diagnostics and fixes

    def location(self, node: ast.AST) -> Location:
        return Location(self.display_path, *self.source.span(node))

    def diagnostic(
        self,
        code: str,
        node: ast.AST,
        message: str,
        *,
        confidence: Confidence = Confidence.HIGH,
        fix: Fix | None = None,
        notes: tuple[str, ...] = (),
    ) -> Diagnostic:
        rule = get_rule(code)
        return Diagnostic(
            code=code,
            message=message,
            location=self.location(node),
            severity=rule.severity,
            passes=("static",),
            confidence=confidence,
            fix=fix,
            notes=notes,
        )

    def edit(self, node: ast.AST, content: str) -> Edit:
        """Replace the source of `node` by `content`."""
        return edits.replace_node(self.semantic, node, content)

    def add_keyword_fix(self, call: ast.Call, keyword: str, value: str, description: str) -> Fix:
        """Insert `keyword=value` as the last argument of `call`, or replace an existing value."""
        return edits.add_keyword(self.semantic, call, keyword, value, description)

    def remove_argument(self, call: ast.Call, value: ast.AST) -> Edit | None:
        """Delete the argument of `call` whose value is `value`, with its separating comma."""
        return edits.remove_argument(self.semantic, call, value)
