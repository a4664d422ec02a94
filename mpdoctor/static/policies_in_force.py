"""The dtype policy in force at any point of a file: the policy calls it makes (`set_global_policy`, `set_floatx`),
what each node may run under (following the calls of a function back to their sites, and the contexts other
modules of the project put it in), what a layer construction computes under. Built on the file's semantic model
(mpdoctor.static.semantic); rules ask it through their checker."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable

from mpdoctor.facts.dtypes import is_float16_compute
from mpdoctor.facts.records import LayerRecord, PolicyEvent, SourceRef
from mpdoctor.static.policies import POLICY_SETTERS, dtype_keyword, policy_from_expr
from mpdoctor.static.semantic import SemanticModel

DEFAULT_POLICY = "float32"


class PoliciesInForce:
    """Policy queries about one file, each cached: rules ask them of the same layer constructions, each for its
    own."""

    def __init__(self, model: SemanticModel) -> None:
        self.model = model
        self._policies: dict[ast.AST, frozenset[str | None]] = {}  # policies_at of a node
        self._entry_policies: dict[ast.AST, frozenset[str | None]] = {}  # of a function, when it is called
        self._run_sites: dict[tuple[ast.ClassDef, str], list[ast.AST]] = {}

    @functools.cached_property
    def policy_events(self) -> list[PolicyEvent]:
        model = self.model
        events = []
        explicit_policy_set = False
        for call in model.calls_named(*POLICY_SETTERS):  # in source order
            name = model.call_name(call)
            if POLICY_SETTERS[name] and explicit_policy_set:
                continue  # set_floatx no longer changes the policy once one was set explicitly
            explicit_policy_set |= not POLICY_SETTERS[name]
            arg = call.args[0] if call.args else (call.keywords[0].value if call.keywords else None)
            if isinstance(arg, ast.Name) and arg.id not in model.module_constants:
                arg = model.last_assignment(arg.id, call) or arg  # `policy = Policy(...)` inside a function
            policy = policy_from_expr(arg, model.imports, model.module_constants)
            events.append(
                PolicyEvent(
                    policy,
                    name,
                    SourceRef(model.path, call.lineno),
                    node=call,
                    scope=model.enclosing_function(call),
                )
            )
        return events

    def policies_at(self, node: ast.AST) -> frozenset[str | None]:
        """Every global policy that may be in force when `node` runs (None: set to an unknown value)."""
        return self._policies_at(node, frozenset())

    def _policies_at(self, node: ast.AST, visiting: frozenset) -> frozenset[str | None]:
        if visiting:  # inside a walk up the callers: depends on where it started
            return self._policies_at_uncached(node, visiting)
        found = self._policies.get(node)
        if found is None:  # rules ask it of the same layer constructions, each for its own
            found = self._policies[node] = self._policies_at_uncached(node, visiting)
        return found

    def _policies_at_uncached(self, node: ast.AST, visiting: frozenset) -> frozenset[str | None]:
        model = self.model
        scope = model.enclosing_function(node)
        before = [e for e in self.policy_events if e.scope is scope and e.node.lineno < node.lineno]
        if before:
            return frozenset({before[-1].policy})
        if scope is None:
            return frozenset({model.settings.assumed_policy or DEFAULT_POLICY}) | self._project_policies(model.tree)
        if visiting:
            return self._policies_on_entry(scope, visiting)
        found = self._entry_policies.get(scope)
        if found is None:  # the same for every node of the function that no policy call of its own precedes
            found = self._entry_policies[scope] = self._policies_on_entry(scope, visiting)
        return found

    def _policies_on_entry(self, function: ast.AST, visiting: frozenset) -> frozenset[str | None]:
        """The callers in this file decide, and so do other modules of the project that call it (project
        analysis): both add up."""
        model = self.model
        if function in visiting:
            return self.file_policies
        visiting = visiting | {function}
        from_project = self._project_policies(function)
        cls = model.enclosing_class(function)
        if cls is not None and cls.name in model.custom_layer_classes and model.enclosing_function(cls) is None:
            # The global policy when a method runs is the one at the instance's construction; the instance's own
            # `dtype=` is its compute dtype (class_policies), which sublayers built in __init__ do not inherit.
            from_project |= self._project_policies(cls)
            sites = model.construction_sites(cls.name)
            if not sites:
                return self.file_policies | from_project
            return frozenset().union(*(self._policies_at(site.node, visiting) for site in sites)) | from_project
        if cls is not None and model.enclosing_function(cls) is None:
            runs = self._method_run_sites(cls, function.name)  # type: ignore[attr-defined]
            # Made here but never run or handed over here (a HyperModel no tuner gets, issue 29): whatever runs it
            # later holds the instance made under the policy at its construction, not a later cell's.
            runs = runs or [*model.calls_to(cls.name)]
            if not runs:
                return self.file_policies | from_project
            return frozenset().union(*(self._policies_at(site, visiting) for site in runs)) | from_project
        callers: list[ast.AST] = [*model.calls_to(function.name)]  # type: ignore[attr-defined]
        callers = callers or self._handed_over_sites(function)
        if not callers:
            return self.file_policies | from_project
        result: set[str | None] = set(from_project)
        for caller in callers:
            result |= self._policies_at(caller, visiting)
        return frozenset(result)

    def _handed_over_sites(self, function: ast.AST) -> list[ast.AST]:
        """Where a module-level function never called by name may run (issue 29): the call it is handed to
        (`kt.Hyperband(build_model, ...)`) and every method call on what that call returned (`tuner.search(...)`,
        which calls `build_model(hp)`), in a notebook's earlier cell too. Empty when it is handed to nothing here."""
        model = self.model
        if model.enclosing_function(function) is not None:
            return []
        name = function.name  # type: ignore[attr-defined]
        if name not in self._argument_names:  # handed to no call: the walk below would find nothing
            return []
        holders: set[str] = set()
        sites: list[ast.AST] = []
        for call in model.calls:  # source order: a holder is bound before its methods are called
            func = call.func
            receiver = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
            if receiver is not None and receiver in holders:
                sites.append(call)
            elif any(isinstance(a, ast.Name) and a.id == name for a in [*call.args, *(k.value for k in call.keywords)]):
                sites.append(call)
                holder = _assigned_name(model, call)
                if holder is not None:
                    holders.add(holder)
        return sites

    @functools.cached_property
    def _argument_names(self) -> frozenset[str]:
        """The bare names passed to some call of the file: one walk, instead of one per function asked about (a
        2,000-line file of 143 builders spent 0.5 s rescanning its calls)."""
        return frozenset(
            a.id
            for call in self.model.calls
            for a in [*call.args, *(k.value for k in call.keywords)]
            if isinstance(a, ast.Name)
        )

    def _project_policies(self, scope: ast.AST) -> frozenset[str | None]:
        """The policies entry points elsewhere in the project run `scope` (a def, a class, the module) under."""
        model = self.model
        if model.settings.project is None:
            return frozenset()
        return model.settings.project.policies(model.qualname(scope))

    def _method_run_sites(self, cls: ast.ClassDef, method: str) -> list[ast.AST]:
        """Where a method of a module-level class (not a layer) may run: `obj.method(...)` / `Cls.method(...)`, and,
        for an instance handed to something that calls it later (a KerasTuner `HyperModel` given to a tuner), the
        call it is handed to and every method call on what that call returned (`tuner.search(...)`). Empty when
        the class is never used in this file (its callers are elsewhere)."""
        found = self._run_sites.get((cls, method))
        if found is None:
            found = self._run_sites[(cls, method)] = self._find_method_run_sites(cls, method)
        return found

    def _find_method_run_sites(self, cls: ast.ClassDef, method: str) -> list[ast.AST]:
        model = self.model
        instances: set[str] = set()  # names bound to an instance
        holders: set[str] = set()  # names bound to what an instance was handed to
        sites: list[ast.AST] = []
        for construction in model.calls_to(cls.name):
            target = _assigned_name(self.model, construction)
            parent = model.parents.get(construction)
            if target is not None:
                instances.add(target)
            elif isinstance(parent, (ast.Call, ast.keyword)):  # `kt.RandomSearch(MyHyperModel(), ...)`
                outer = parent if isinstance(parent, ast.Call) else model.parents.get(parent)
                sites.append(construction)
                holder = _assigned_name(self.model, outer) if isinstance(outer, ast.Call) else None
                if holder is not None:
                    holders.add(holder)
        for call in model.calls:  # source order: a holder is bound before its methods are called
            func = call.func
            receiver = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
            called = receiver in instances | {cls.name} and func.attr == method  # type: ignore[union-attr]
            if receiver is not None and (called or receiver in holders):
                sites.append(call)
            elif any(
                isinstance(a, ast.Name) and a.id in instances for a in [*call.args, *(k.value for k in call.keywords)]
            ):
                sites.append(call)  # the instance handed over: it may run from here on
                holder = _assigned_name(self.model, call)
                if holder is not None:
                    holders.add(holder)
        return sites

    @functools.cached_property
    def file_policies(self) -> frozenset[str | None]:
        """Policies a function with unknown callers may run under: the policy the module ends its import with, or
        any policy some function sets."""
        module_events = [e for e in self.policy_events if e.scope is None]
        result = {e.policy for e in self.policy_events if e.scope is not None}
        result.add(
            module_events[-1].policy if module_events else (self.model.settings.assumed_policy or DEFAULT_POLICY)
        )
        return frozenset(result)

    def class_policies(self, class_name: str, visiting: frozenset = frozenset()) -> frozenset[str | None]:
        """Policies instances of a local layer class compute under (their `dtype=` or the global policy), also where
        other modules of the project construct them."""
        model = self.model
        cls = model.classes.get(class_name)
        from_project = self._project_policies(cls) if cls is not None else frozenset()
        sites = model.construction_sites(class_name)
        if not sites:
            return self.file_policies | from_project
        result: set[str | None] = set(from_project)
        for site in sites:
            result |= self.layer_policies(site, visiting)
        return frozenset(result)

    def layer_policies(self, layer: LayerRecord, visiting: frozenset = frozenset()) -> frozenset[str | None]:
        """Policies the constructed layer computes under: its `dtype=` if given, else the global one in force."""
        model = self.model
        dtype = dtype_keyword(layer.node)
        if dtype is not None:
            return frozenset({policy_from_expr(dtype, model.imports, model.module_constants)})
        return self._policies_at(layer.node, visiting)

    def float16_policy(self, policies: Iterable[str | None]) -> str | None:
        """The first float16/bfloat16-compute policy among `policies` (sorted for stable messages)."""
        return min((p for p in policies if is_float16_compute(p)), default=None)

    @functools.cached_property
    def any_float16_policy(self) -> bool:
        model = self.model
        if any(is_float16_compute(e.policy) for e in self.policy_events):
            return True
        if is_float16_compute(model.settings.assumed_policy):
            return True
        if model.settings.project is not None and model.settings.project.low_precision:
            return True
        return any(
            is_float16_compute(policy_from_expr(dtype_keyword(lc.node), model.imports, model.module_constants))
            for lc in model.layer_calls
        )


def _assigned_name(model: SemanticModel, node: ast.AST) -> str | None:
    """`name` in `name = <node>` (one plain target), else None."""
    parent = model.parents.get(node)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        return parent.targets[0].id
    if isinstance(parent, ast.AnnAssign) and isinstance(parent.target, ast.Name):
        return parent.target.id
    return None
