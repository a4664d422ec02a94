"""What an expression of the project's code may evaluate to, as far as the project analysis follows values: policies
through literals, `Policy(...)`, variables, conditional expressions, registries, helper functions returning them and
command-line flags; the functions and classes a call may reach; the condition a branch runs under."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from mpdoctor.facts.dtypes import KNOWN_POLICIES, dtype_name
from mpdoctor.facts.keras_semantics import BASE_LAYERS, BASE_MODELS
from mpdoctor.project.discovery import ModuleResolver
from mpdoctor.project.modules import (
    ClassInfo,
    FlagInfo,
    FunctionInfo,
    ModuleInfo,
    ModuleLoader,
    flag_like,
)
from mpdoctor.project.values import (
    Cls,
    Flag,
    Frame,
    Func,
    Inst,
    Mod,
    Pol,
    Registry,
    Text,
    Values,
    join_conditions,
    merge_values,
    negate,
    source_segment,
    with_condition,
)
from mpdoctor.static.astutil import keyword_value
from mpdoctor.static.names import ImportMap
from mpdoctor.static.policies import POLICY_CONSTRUCTORS


class Evaluator:
    """Values of expressions in a frame, module-level names and class hierarchies (memoised for one analysis)."""

    def __init__(self, modules: ModuleLoader) -> None:
        self.modules = modules
        # The loader's own: its flags fill up as it loads modules.
        self.resolver: ModuleResolver = modules.resolver
        self.flags: dict[str, FlagInfo] = modules.flags
        self._returns_active: set[int] = set()
        self._lookups: dict[tuple[str, str], Values] = {}
        self._keras_classes: dict[int, bool] = {}

    # ---------------------------------------------------------------- calls and classes

    def bind(self, fn: FunctionInfo, call: ast.Call, frame: Frame) -> dict[str, Values]:
        """The values of the call's arguments the analysis can follow, by parameter name."""
        params = fn.params
        if fn.cls is not None and params and not _is_static(fn.node):
            params = params[1:]
        env: dict[str, Values] = {}
        for name, arg in zip(params, call.args, strict=False):
            if isinstance(arg, ast.Starred):
                break
            value = self.value(arg, frame)
            if value:
                env[name] = value
        for keyword in call.keywords:
            if keyword.arg and keyword.arg in (*params, *fn.keyword_params):
                value = self.value(keyword.value, frame)
                if value:
                    env[keyword.arg] = value
        if not any(isinstance(a, ast.Starred) for a in call.args) and all(k.arg for k in call.keywords):
            given = {*params[: len(call.args)], *(k.arg for k in call.keywords)}
            for name, default in _string_defaults(fn).items():  # `precision: str = "mixed_float16"` not passed
                if name not in given and name not in env:
                    env[name] = self.value(default, frame)
        return env

    def method(self, cls: ClassInfo, name: str, depth: int = 0) -> FunctionInfo | None:
        if name in cls.methods:
            return cls.methods[name]
        if depth > 8:
            return None
        for base in cls.node.bases:
            for value in self.value(base, Frame(cls.module, None, {})):
                if isinstance(value, Cls) and value.cls is not cls:
                    found = self.method(value.cls, name, depth + 1)
                    if found is not None:
                        return found
        return None

    def is_keras_class(self, cls: ClassInfo, depth: int = 0) -> bool:
        if id(cls) not in self._keras_classes:
            self._keras_classes[id(cls)] = False
            self._keras_classes[id(cls)] = self._keras_base(cls, depth)
        return self._keras_classes[id(cls)]

    def _keras_base(self, cls: ClassInfo, depth: int) -> bool:
        if depth > 8:
            return False
        for base in cls.node.bases:
            name = cls.module.imports.resolve(base)
            if name in BASE_LAYERS or name in BASE_MODELS or (name or "").startswith("keras.layers."):
                return True
            for value in self.value(base, Frame(cls.module, None, {})):
                if isinstance(value, Cls) and value.cls is not cls and self.is_keras_class(value.cls, depth + 1):
                    return True
        return False

    # ---------------------------------------------------------------- values

    def value(self, node: ast.AST, frame: Frame, depth: int = 0) -> Values:
        """What an expression may evaluate to, among the values the analysis follows (empty: unknown)."""
        if depth > 12:
            return frozenset()
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                name = dtype_name(node.value)
                return frozenset({Pol(name)} if name in KNOWN_POLICIES else {Text(node.value)})
            return frozenset()
        if isinstance(node, ast.Name):
            if node.id in frame.env:
                return frame.env[node.id]
            return self.lookup(frame.module, node.id, depth + 1, frame.import_map)
        if isinstance(node, ast.Attribute):
            return self._attribute(node, frame, depth)
        if isinstance(node, ast.IfExp):
            condition = self.condition(node.test, frame)
            return merge_values(
                with_condition(self.value(node.body, frame, depth + 1), condition),
                with_condition(self.value(node.orelse, frame, depth + 1), negate(condition)),
            )
        if isinstance(node, ast.BoolOp):
            return merge_values(*(self.value(v, frame, depth + 1) for v in node.values))
        if isinstance(node, ast.Dict):
            return self._dict(node, frame, depth)
        if isinstance(node, ast.Subscript):
            return self._lookup_key(self.value(node.value, frame, depth + 1), node.slice, None, frame, depth)
        if isinstance(node, ast.Call):
            return self._call_value(node, frame, depth)
        return frozenset()

    def _attribute(self, node: ast.Attribute, frame: Frame, depth: int) -> Values:
        canonical = frame.import_map.resolve(node)
        if canonical is not None:
            last = canonical.rsplit(".", 1)[-1]
            if canonical.startswith(("tf.", "np.", "keras.")) and dtype_name(last) in KNOWN_POLICIES:
                return frozenset({Pol(dtype_name(last))})
        found: set = set()
        for base in self.value(node.value, frame, depth + 1):
            if isinstance(base, Mod):
                found |= self._module_attribute(base.path, node.attr, depth)
            elif isinstance(base, (Cls, Inst)):
                fn = self.method(base.cls, node.attr)
                if fn is not None:
                    found.add(Func(fn))
        if not found and node.attr in self.flags and flag_like(node.value):
            found.add(Flag(node.attr))
        return frozenset(found)

    def _module_attribute(self, path: str, name: str, depth: int) -> Values:
        module = self.modules.get(path)
        if module is not None:
            found = self.lookup(module, name, depth + 1, module.imports)
            if found:
                return found
        package = self.resolver.package_of(path)
        if package is not None:
            sub = self.resolver.child(package, name)
            if sub is not None:
                return frozenset({Mod(sub)})
        return frozenset()

    def lookup(self, module: ModuleInfo, name: str, depth: int, imports: ImportMap | None = None) -> Values:
        """A module-level name: a definition, a constant, or what it was imported as (the same wherever it is
        asked from: computed once per module and name)."""
        if depth > 12:
            return frozenset()
        key = (module.path, name)
        found = self._lookups.get(key)
        if found is None:
            self._lookups[key] = frozenset()  # a name defined through itself (a cycle) is unknown
            found = self._lookups[key] = self._lookup(module, name, depth)
        return found

    def _lookup(self, module: ModuleInfo, name: str, depth: int) -> Values:
        found = module.defs.get(name)
        if isinstance(found, FunctionInfo):
            return frozenset({Func(found)})
        if isinstance(found, ClassInfo):
            return frozenset({Cls(found)})
        values = module.assigned.get(name)
        if values is not None and len(values) == 1:
            return self.value(values[0], Frame(module, None, {}), depth + 1)
        binding = module.bindings.get(name)
        if binding is None:
            return self._star_imported(module, name, depth)
        return self.import_value(module, *binding, depth)

    def import_value(self, module: ModuleInfo, node: ast.AST, alias: ast.alias, depth: int) -> Values:
        """What an import binds: a project module, or a name defined (or re-exported) in one."""
        if isinstance(node, ast.ImportFrom):
            target = self.resolver.module(module.path, node.level, node.module or "")
            if target is None:
                return frozenset()
            return self._module_attribute(target, alias.name, depth + 1)
        dotted = alias.name if alias.asname else alias.name.split(".")[0]
        target = self.resolver.module(module.path, 0, dotted)
        return frozenset({Mod(target)}) if target is not None else frozenset()

    def _star_imported(self, module: ModuleInfo, name: str, depth: int) -> Values:
        for node in module.import_nodes:
            if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                target = self.resolver.module(module.path, node.level, node.module or "")
                if target is not None and target in self.modules:
                    found = self.lookup(self.modules[target], name, depth + 1)
                    if found:
                        return found
        return frozenset()

    def _dict(self, node: ast.Dict, frame: Frame, depth: int) -> Values:
        items = []
        for key, value in zip(node.keys, node.values, strict=False):
            if key is None:
                continue
            key_text = repr(key.value) if isinstance(key, ast.Constant) else source_segment(key, 30)
            values = self.value(value, frame, depth + 1)
            if any(isinstance(v, (Func, Cls, Pol)) for v in values):
                items.append((key_text, values))
        return frozenset({Registry(tuple(items))}) if items else frozenset()

    def _lookup_key(
        self, containers: Values, key: ast.AST, default: ast.AST | None, frame: Frame, depth: int
    ) -> Values:
        """`REGISTRY[key]` / `REGISTRY.get(key, default)`: every value the key may select (a policy keeps the key
        as its condition); a literal key selects its own item (`config["precision"]`)."""
        if isinstance(key, ast.Constant):
            chosen = [v for c in containers if isinstance(c, Registry) for k, v in c.items if k == repr(key.value)]
            if chosen:
                return merge_values(*chosen)
        found: list[Values] = []
        flag = self.flags.get(key.attr) if isinstance(key, ast.Attribute) and flag_like(key.value) else None
        for container in containers:
            if not isinstance(container, Registry):
                continue
            for item_key, values in container.items:
                if flag is not None:
                    when = f"when {flag.option} {item_key.strip(chr(39) + chr(34))} is given"
                else:
                    when = f"when {source_segment(key, 40)} is {item_key}"
                found.append(with_condition(values, when))
        if found and default is not None:
            found.append(self.value(default, frame, depth + 1))
        return merge_values(*found) if found else frozenset()

    def _call_value(self, node: ast.Call, frame: Frame, depth: int) -> Values:
        name = frame.import_map.resolve(node.func)
        if name in POLICY_CONSTRUCTORS:
            arg = node.args[0] if node.args else keyword_value(node, "name")
            return self.policy_values(arg, frame, depth + 1) if arg is not None else frozenset()
        if isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
            containers = self.value(node.func.value, frame, depth + 1)
            default = node.args[1] if len(node.args) > 1 else None
            return self._lookup_key(containers, node.args[0], default, frame, depth)
        found: list[Values] = []
        for target in self.value(node.func, frame, depth + 1):
            if isinstance(target, Func):
                found.append(self.returns(target.fn, node, frame, depth))
            elif isinstance(target, Cls):
                found.append(frozenset({Inst(target.cls)}))
        return merge_values(*found) if found else frozenset()

    def returns(self, fn: FunctionInfo, call: ast.Call, frame: Frame, depth: int) -> Values:
        """What `fn` may return when called at `call` (policies keep the conditions of the branches they are
        returned in, and say which function chose them)."""
        if id(fn) in self._returns_active or depth > 10:
            return frozenset()
        self._returns_active.add(id(fn))
        try:
            env = self.bind(fn, call, frame)
            inner = Frame(fn.module, fn, env)
            found = []
            for value, conditions in _returns(fn.node.body, [], inner, self):
                values = self.value(value, inner, depth + 1)
                where = f"as {fn.qualname}() returns it"
                found.append(with_condition(values, join_conditions(*conditions, where) if conditions else ""))
            return merge_values(*found) if found else frozenset()
        finally:
            self._returns_active.discard(id(fn))

    def policy_values(self, node: ast.AST, frame: Frame, depth: int = 0) -> frozenset[Pol]:
        """The policies an argument of a policy setter may be, each with when."""
        found: set[Pol] = set()
        for value in self.value(node, frame, depth):
            if isinstance(value, Pol):
                found.add(value)
            elif isinstance(value, Flag):
                found |= self._flag_policies(value.name)
        return frozenset(found) or frozenset({Pol(None)})

    def _flag_policies(self, name: str) -> set[Pol]:
        flag = self.flags[name]
        found = set()
        default = flag.default.value if isinstance(flag.default, ast.Constant) else None
        for choice in flag.choices or []:
            if isinstance(choice, ast.Constant) and isinstance(choice.value, str):
                policy = dtype_name(choice.value)
                if policy in KNOWN_POLICIES:
                    when = f"by default ({flag.option} {choice.value})" if choice.value == default else None
                    found.add(Pol(policy, when or f"when {flag.option} {choice.value} is given"))
        if isinstance(default, str) and dtype_name(default) in KNOWN_POLICIES and not flag.choices:
            found.add(Pol(dtype_name(default), f"by default ({flag.option} {default})"))
        return found or {Pol(None, f"from {flag.option}")}

    # ---------------------------------------------------------------- conditions

    def none_test(self, test: ast.AST, frame: Frame) -> bool | None:
        """The outcome of `x is None` / `x is not None` when every value `x` may hold is a string the analysis
        knows (a policy name, a text): it is never None. None: not known."""
        if not (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Is, ast.IsNot))
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None
        ):
            return None
        values = self.value(test.left, frame)
        if not values or not all(isinstance(v, Text) or (isinstance(v, Pol) and v.policy) for v in values):
            return None
        return isinstance(test.ops[0], ast.IsNot)

    def condition(self, test: ast.AST, frame: Frame) -> str:
        """`when --amp is given`, `when --precision fp16 is given`, `when args.fp16 and ...`."""
        negated = False
        while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, negated = test.operand, not negated
        text, inverted = self._condition_text(test, frame)
        text = text or f"when `{source_segment(test, 60)}`"
        return negate(text) if negated ^ inverted else text

    def _condition_text(self, test: ast.AST, frame: Frame) -> tuple[str | None, bool]:
        """What a test means in terms of flags (None: nothing known), and whether it means the opposite (`!=`)."""
        if isinstance(test, ast.Attribute) and test.attr in self.flags and flag_like(test.value):
            flag = self.flags[test.attr]
            return (f"when {flag.option} is given" if flag.boolean else f"when {flag.option} is set"), False
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq))):
            return None, False
        inverted = isinstance(test.ops[0], ast.NotEq)
        left, right = test.left, test.comparators[0]
        if isinstance(left, ast.Attribute) and left.attr in self.flags and isinstance(right, ast.Constant):
            return f"when {self.flags[left.attr].option} {right.value} is given", inverted
        # `if dtype == tf.float16:` where `dtype` holds policies chosen by a flag: the flag's condition
        bound = {v.policy: v.condition for v in self.value(left, frame) if isinstance(v, Pol) and v.condition}
        wanted = [v.policy for v in self.value(right, frame) if isinstance(v, Pol)]
        if len(wanted) == 1 and wanted[0] in bound:
            return bound[wanted[0]], inverted
        return None, False


def _returns(body: list[ast.stmt], conditions: list[str], frame: Frame, evaluator: Evaluator) -> Iterator:
    """(returned expression, conditions of the branches it is in) for every return of a function body."""
    for stmt in body:
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            yield stmt.value, conditions
        elif isinstance(stmt, ast.If):
            condition = evaluator.condition(stmt.test, frame)
            yield from _returns(stmt.body, [*conditions, condition], frame, evaluator)
            yield from _returns(stmt.orelse, [*conditions, negate(condition)], frame, evaluator)
        elif isinstance(stmt, (ast.For, ast.While, ast.With, ast.Try)):
            for block in [stmt.body, getattr(stmt, "orelse", []), *(h.body for h in getattr(stmt, "handlers", []))]:
                yield from _returns(block, conditions, frame, evaluator)


def _string_defaults(fn: FunctionInfo) -> dict[str, ast.Constant]:
    """The parameters of `fn` whose default is a string literal."""
    args = fn.node.args
    positional = [*args.posonlyargs, *args.args]
    pairs = [*zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True)]
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
    return {a.arg: d for a, d in pairs if isinstance(d, ast.Constant) and isinstance(d.value, str)}


def _is_static(node: ast.AST) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
