"""Project analysis: follow the dtype policy from a project's entry points into the modules that build its models.

`train.py` sets `mixed_float16` inside `main()` behind `if args.amp:` and calls `build_classifier()` from
`models/net.py`: checked file by file, `net.py` runs under no policy at all. This module reads the project's own
modules once per run (static, nothing executes), interprets each entry point's code in order (branches, loops,
calls into other modules, classes constructed, functions passed to `app.run`, registries `MODELS[name]()`), and
records for every function and class reached from another module the policies in force when it runs, each with
where and when it was set and the calls leading there (mpdoctor.static.policy_context).

Policy values are followed through literals, `Policy(...)`, variables, conditional expressions, dicts, helper
functions returning them, and absl/argparse flags (their `choices` or default). A value it cannot know is a policy
`None`, which no rule treats as low precision: no module is ever analysed under a policy that no entry point sets.
Calls it cannot resolve (getattr factories, dynamic imports, methods of unknown objects) reach nothing; those met
while a low-precision policy is in force are listed in the notes (`--verbose`), and the functions behind them keep
the per-file behaviour.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mpdoctor.facts.dtypes import KNOWN_POLICIES, dtype_name
from mpdoctor.facts.keras_semantics import BASE_LAYERS, BASE_MODELS
from mpdoctor.project.discovery import TEXTS, ModuleResolver, ProjectFiles, is_test_module
from mpdoctor.sources import read_source
from mpdoctor.static.names import ImportMap
from mpdoctor.static.policies import POLICY_CONSTRUCTORS, POLICY_SETTERS
from mpdoctor.static.policy_context import MODULE_SCOPE, FileContexts, PolicyContext, Step

_BUDGET = 400_000  # statements interpreted per run: a pathological project stops here (and says so)
_MAX_DEPTH = 40  # nested calls followed
_MAX_VALUES = 32  # alternatives kept for one value
_LIFECYCLE = ("__init__", "build", "call", "__call__")  # what a constructed Keras layer runs with its policy
_FLAG_ROOTS = ("FLAGS", "flags", "flags_obj", "args", "opt", "opts", "options", "cfg", "config", "params", "hparams")
_DYNAMIC = {"getattr", "__import__", "eval", "exec", "globals", "locals", "vars"}
_DYNAMIC_CANONICAL = ("importlib.import_module",)
_ABSL_DEFINES = ("DEFINE_string", "DEFINE_enum", "DEFINE_bool", "DEFINE_boolean", "DEFINE_integer", "DEFINE_float")


# ------------------------------------------------------------------------------------------------ abstract values


@dataclass(frozen=True)
class Pol:
    """A policy value (None: a value that is not a policy the static pass knows) and when it applies."""

    policy: str | None
    condition: str = ""


@dataclass(frozen=True)
class Text:
    value: str


@dataclass(frozen=True)
class Flag:
    name: str


@dataclass(frozen=True)
class Func:
    fn: FunctionInfo


@dataclass(frozen=True)
class Cls:
    cls: ClassInfo


@dataclass(frozen=True)
class Inst:
    cls: ClassInfo


@dataclass(frozen=True)
class Mod:
    path: str  # a module file, or a package directory


@dataclass(frozen=True)
class Registry:
    """A dict literal whose values are functions, classes or policies: `MODELS = {"resnet": build_resnet}`."""

    items: tuple[tuple[str, frozenset], ...]


Values = frozenset


def _merge(*values: Values) -> Values:
    merged = frozenset().union(*values)
    return merged if len(merged) <= _MAX_VALUES else frozenset(list(merged)[:_MAX_VALUES])


def _with_condition(values: Values, condition: str) -> Values:
    if not condition:
        return values
    return frozenset(Pol(v.policy, _join(condition, v.condition)) if isinstance(v, Pol) else v for v in values)


def _join(*conditions: str) -> str:
    """`when A` + `when B` -> `when A and B` (each part once)."""
    parts: list[str] = []
    for condition in conditions:
        for part in condition.split(" and ") if condition else ():
            if parts and part.startswith("when "):
                part = part[len("when ") :]
            if part and part not in parts and f"when {part}" not in parts:
                parts.append(part)
    return " and ".join(parts)


# ------------------------------------------------------------------------------------------------ modules


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

    def __init__(self, path: str, shown: str, text: str, tree: ast.Module) -> None:
        self.path = path
        self.shown = shown
        self.text = text
        self.tree = tree
        self.defs: dict[str, FunctionInfo | ClassInfo] = {}
        self.assigned: dict[str, list[ast.AST]] = {}
        self.import_nodes: list[ast.Import | ast.ImportFrom] = []
        self.flag_defs: list[ast.Call] = []
        self._index(tree.body, prefix="")
        self.imports = ImportMap(self.import_nodes)
        self.bindings = import_bindings(self.import_nodes)

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


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _flag_definitions(module: ModuleInfo) -> dict[str, FlagInfo]:
    """absl `flags.DEFINE_*` and argparse `add_argument` calls anywhere in the module: dest -> FlagInfo."""
    found: dict[str, FlagInfo] = {}
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        attr = node.func.attr
        if attr in _ABSL_DEFINES:
            name = node.args[0] if node.args else _keyword(node, "name")
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                continue
            default = node.args[1] if len(node.args) > 1 else _keyword(node, "default")
            choices = _literal_list(node.args[2] if len(node.args) > 2 and attr == "DEFINE_enum" else None)
            choices = choices or _literal_list(_keyword(node, "enum_values"))
            found[name.value] = FlagInfo(f"--{name.value}", default, choices, attr.startswith("DEFINE_bool"))
        elif attr == "add_argument":
            options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            long = [o for o in options if o.startswith("--")] or [o for o in options if o.startswith("-")]
            dest = _keyword(node, "dest")
            if isinstance(dest, ast.Constant) and isinstance(dest.value, str):
                name = dest.value
            elif long:
                name = long[0].lstrip("-").replace("-", "_")
            elif options:
                name = options[0]  # a positional argument
            else:
                continue
            action = _keyword(node, "action")
            boolean = isinstance(action, ast.Constant) and action.value in ("store_true", "store_false")
            found[name] = FlagInfo(
                long[0] if long else name, _keyword(node, "default"), _literal_list(_keyword(node, "choices")), boolean
            )
    return found


# ------------------------------------------------------------------------------------------------ the walk


@dataclass
class Frame:
    """One function being interpreted: its module, local names, the conditions of the branch it is in."""

    module: ModuleInfo
    function: FunctionInfo | ClassInfo | None  # None: module top level
    env: dict[str, Values]
    conditions: list[str] = field(default_factory=list)
    imports: ImportMap | None = None  # with the function's own imports, once it has some
    depth: int = 0
    local_imports: list = field(default_factory=list)

    @property
    def import_map(self) -> ImportMap:
        return self.imports or self.module.imports

    def scope_qualname(self) -> str:
        return self.function.qualname if self.function is not None else MODULE_SCOPE


State = tuple  # of PolicyContext, unique by key


def _unique(contexts) -> State:
    seen: dict[tuple, PolicyContext] = {}
    for context in contexts:
        seen.setdefault(context.key, context)
    return tuple(seen.values())


@dataclass
class Reach:
    """Contexts recorded for one function or class, by key (the first path found is kept)."""

    module: ModuleInfo
    qualname: str
    node: ast.AST
    contexts: dict[tuple, PolicyContext] = field(default_factory=dict)
    across_modules: bool = False  # reached by a call from another module (the per-file pass cannot see that)
    builds: bool = False  # constructs Keras layers or models (a "builder", for --show-contexts)


class Analysis:
    def __init__(self, files: ProjectFiles, shown: Callable[[str], str], checked: set[str]) -> None:
        self.files = files
        self.resolver = ModuleResolver(files.root, files.files)
        self.shown = shown
        self.checked = checked
        self.modules = _Modules(self)
        self.sources: dict[str, tuple[str, ast.Module]] = {}  # what the per-file pass may reuse
        self.flags: dict[str, FlagInfo] = {}
        self.reached: dict[tuple[str, str], Reach] = {}
        self.notes: list[str] = []
        self._noted: set[tuple] = set()
        self._memo: dict[tuple, State] = {}
        self._active: set[int] = set()
        self._imported: dict[str, set[tuple]] = {}
        self.budget = _BUDGET
        self._returns_active: set[int] = set()
        self._lookups: dict[tuple[str, str], Values] = {}
        self._keras_classes: dict[int, bool] = {}

    # ---------------------------------------------------------------- entry points

    def run(self) -> None:
        for path in self.files.entries:
            module = self.modules.get(path)
            if module is None:
                continue
            entry = Step(module.shown, 1, "entry point")
            state = (PolicyContext("float32", None, "", (entry,), 0, path),)
            after = self._run_module(module, state)
            if is_test_module(path, self.files.root):
                self._run_tests(module, after)
            if self.budget <= 0:
                self.note(module, 1, "the project is too large to follow every call: the analysis stopped early")
                break

    def _run_tests(self, module: ModuleInfo, state: State) -> None:
        """pytest calls a test module's `test_*` functions (and `Test*` classes' methods) after importing it."""
        tests = [d for name, d in module.defs.items() if name.startswith("test") and isinstance(d, FunctionInfo)]
        for name, cls in module.defs.items():
            if name.startswith("Test") and isinstance(cls, ClassInfo):
                tests += [m for method, m in cls.methods.items() if method.startswith("test")]
        frame = Frame(module, None, {})
        for test in tests:
            step = Step(module.shown, test.node.lineno, f"pytest runs {test.qualname}()")
            self.enter(test, None, state, frame, bound={}, step=step)

    def _run_module(self, module: ModuleInfo, state: State) -> State:
        key = (id(module), frozenset(c.key for c in state))
        done = self._imported.setdefault(module.path, set())
        if key in done or id(module) in self._active:
            return state
        done.add(key)
        self._active.add(id(module))
        try:
            return self.block(module.tree.body, state, Frame(module, None, {}))
        finally:
            self._active.discard(id(module))

    # ---------------------------------------------------------------- statements

    def block(self, body: list[ast.stmt], state: State, frame: Frame) -> State:
        for stmt in body:
            self.budget -= 1
            if self.budget <= 0:
                return state
            state = self.statement(stmt, state, frame)
        return state

    def statement(self, stmt: ast.stmt, state: State, frame: Frame) -> State:
        if isinstance(stmt, ast.If):
            if _is_main_guard(stmt.test):
                return self.block(stmt.body, state, frame)
            state = self.expression(stmt.test, state, frame)
            condition = self.condition(stmt.test, frame)
            return self.branches(
                [(stmt.body, condition), (stmt.orelse, _negate(condition) if stmt.orelse else "")], state, frame
            )
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            state = self.expression(stmt.iter if not isinstance(stmt, ast.While) else stmt.test, state, frame)
            looped = self.branches([(stmt.body, ""), ([], "")], state, frame)
            return self.block(stmt.orelse, looped, frame)
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                state = self.expression(item.context_expr, state, frame)
            return self.block(stmt.body, state, frame)
        if isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            after_body = self.block(stmt.body, state, frame)
            outcomes = [self.block(stmt.orelse, after_body, frame)]
            outcomes += [self.block(h.body, _unique(state + after_body), frame) for h in stmt.handlers]
            return self.block(stmt.finalbody, _unique(c for s in outcomes for c in s), frame)
        if isinstance(stmt, ast.Match):
            state = self.expression(stmt.subject, state, frame)
            return self.branches([(case.body, "") for case in stmt.cases] + [([], "")], state, frame)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            qualname = f"{frame.scope_qualname()}.<locals>.{stmt.name}" if frame.function else stmt.name
            frame.env[stmt.name] = frozenset({Func(self._local_function(frame, stmt, qualname))})
            return state
        if isinstance(stmt, ast.ClassDef):
            return state
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            return self.import_statement(stmt, state, frame)
        state = self.expression(stmt, state, frame)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            value = self.value(stmt.value, frame)
            value = _with_condition(value, _join(*frame.conditions))
            for target in targets:
                if isinstance(target, ast.Name):
                    frame.env[target.id] = value
        return state

    def branches(self, branches: list[tuple[list[ast.stmt], str]], state: State, frame: Frame) -> State:
        """Each branch from the same state and names; afterwards any of their outcomes may hold."""
        outcomes: list[State] = []
        envs: list[dict[str, Values]] = []
        for body, condition in branches:
            branch = Frame(
                frame.module,
                frame.function,
                dict(frame.env),
                frame.conditions,
                frame.imports,
                frame.depth,
                frame.local_imports,
            )
            if condition:
                branch.conditions = [*frame.conditions, condition]
            outcomes.append(self.block(body, state, branch))
            envs.append(branch.env)
        for name in set().union(*envs):
            frame.env[name] = _merge(*(env.get(name, frozenset()) for env in envs))
        return _unique(c for outcome in outcomes for c in outcome)

    def _local_function(self, frame: Frame, node: ast.AST, qualname: str) -> FunctionInfo:
        cache = frame.module.__dict__.setdefault("_local_defs", {})
        if node not in cache:
            cache[node] = FunctionInfo(frame.module, node, qualname)
        return cache[node]

    def import_statement(self, stmt: ast.Import | ast.ImportFrom, state: State, frame: Frame) -> State:
        """Importing a project module runs its top level (once per policy state, like Python's module cache)."""
        if frame.function is not None:
            frame.local_imports = [*frame.local_imports, stmt]
            frame.imports = ImportMap([*frame.module.import_nodes, *frame.local_imports])
            for local, (node, alias) in import_bindings([stmt]).items():
                frame.env[local] = self._import_value(frame.module, node, alias, 0)
        for path in self._imported_paths(frame.module, stmt):
            module = self.modules.get(path)
            if module is not None and module is not frame.module:
                self.record(module, MODULE_SCOPE, module.tree, state, across=True)
                state = self._run_module(module, state)
        return state

    def _imported_paths(self, module: ModuleInfo, stmt: ast.Import | ast.ImportFrom) -> list[str]:
        found = []
        resolver = self.resolver
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                target = resolver.module(module.path, 0, alias.name)
                if target is not None and target.endswith(".py"):
                    found.append(target)
        else:
            target = resolver.module(module.path, stmt.level, stmt.module or "")
            if target is not None:
                if target.endswith(".py"):
                    found.append(target)
                package = resolver.package_of(target)
                for alias in stmt.names if package is not None else ():
                    sub = resolver.child(package, alias.name)
                    if sub is not None and sub.endswith(".py"):
                        found.append(sub)
        return found

    # ---------------------------------------------------------------- expressions and calls

    def expression(self, node: ast.AST, state: State, frame: Frame) -> State:
        """Every call in `node`, arguments before the call that takes them (not inside lambdas or nested defs)."""
        for call in _calls_in_order(node):
            state = self.call(call, state, frame)
        return state

    def call(self, call: ast.Call, state: State, frame: Frame) -> State:
        name = frame.import_map.resolve(call.func)
        if name in POLICY_SETTERS:
            return self.set_policy(call, name, state, frame)
        if name and name.startswith(("keras.", "hub.")):
            self._note_builder(name, frame)
            return self._callbacks(call, state, frame)
        targets = self.value(call.func, frame)
        entered = False
        outcomes: list[State] = []
        for target in targets:
            if isinstance(target, Func):
                outcomes.append(self.enter(target.fn, call, state, frame))
                entered = True
            elif isinstance(target, Cls):
                outcomes.append(self.construct(target.cls, call, state, frame))
                entered = True
        if not entered:
            self._dynamic(call, state, frame)
            return self._callbacks(call, state, frame)
        return _unique(c for outcome in outcomes for c in outcome)

    def _callbacks(self, call: ast.Call, state: State, frame: Frame) -> State:
        """Functions passed to a call the analysis does not follow (`app.run(main)`, `tf.function(fn)`) may be
        called there, under the policy in force."""
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            if isinstance(arg, (ast.Name, ast.Attribute)):
                for value in self.value(arg, frame):
                    if isinstance(value, Func):
                        state = self.enter(value.fn, call, state, frame)
        return state

    def _note_builder(self, name: str, frame: Frame) -> None:
        last = name.rsplit(".", 1)[-1]
        if frame.function is None or not (
            name.startswith(("keras.layers.", "keras.applications.", "hub.KerasLayer"))
            or last in ("Sequential", "Model")
        ):
            return
        if name.startswith("keras.layers.") and not last[:1].isupper():
            return
        reach = self.reached.get((frame.module.path, frame.function.qualname))
        if reach is not None:
            reach.builds = True

    def set_policy(self, call: ast.Call, name: str, state: State, frame: Frame) -> State:
        arg = call.args[0] if call.args else (call.keywords[0].value if call.keywords else None)
        values = self.policy_values(arg, frame) if arg is not None else frozenset({Pol(None)})
        branch = _join(*frame.conditions)
        origin_text = f"{name.rsplit('.', 1)[-1]}({_segment(arg, 40) if arg is not None else ''})"
        if frame.function is not None:
            origin_text += f" in {frame.function.qualname}()"
        origin = Step(frame.module.shown, call.lineno, origin_text)
        entry = state[0].entry if state else ""
        return _unique(
            PolicyContext(value.policy, origin, _join(branch, value.condition), (origin,), 1, entry)
            for value in sorted(values, key=lambda v: (v.policy or "", v.condition))
        )

    def enter(
        self,
        fn: FunctionInfo,
        call: ast.Call | None,
        state: State,
        frame: Frame,
        bound: dict | None = None,
        step: Step | None = None,
    ) -> State:
        """Interpret `fn` as called at `call` under `state`; the state after it returns."""
        if frame.depth >= _MAX_DEPTH or self.budget <= 0:
            return state
        step = step or Step(frame.module.shown, call.lineno, f"{_segment(call.func, 50)}()")
        across = fn.module is not frame.module
        inner = tuple(c.then(step) for c in state)
        self.record(fn.module, fn.qualname, fn.node, inner, across)
        env = self.bind(fn, call, frame) if bound is None else bound
        key = (id(fn), frozenset(c.key for c in state), _env_key(env))
        if id(fn) in self._active:
            return state
        if key not in self._memo:
            self._memo[key] = state  # a recursive call meets the entry state
            self._active.add(id(fn))
            try:
                callee = Frame(fn.module, fn, env, depth=frame.depth + 1)
                self._memo[key] = self.block(fn.node.body, inner, callee)
            finally:
                self._active.discard(id(fn))
        return self._back(self._memo[key], state, step)

    def construct(self, cls: ClassInfo, call: ast.Call, state: State, frame: Frame) -> State:
        """`Net(...)`: the class is reached (its methods run with the policy at construction), its `__init__` (or
        an inherited one) runs now; a Keras layer's `build` and `call` run later under the same policy."""
        step = Step(frame.module.shown, call.lineno, f"{_segment(call.func, 50)}()")
        across = cls.module is not frame.module
        self.record(cls.module, cls.qualname, cls.node, tuple(c.then(step) for c in state), across)
        if self._is_keras_class(cls):
            reach = self.reached.get((cls.module.path, cls.qualname))
            if reach is not None:
                reach.builds = True
        result = state
        for method in _LIFECYCLE:
            fn = self.method(cls, method)
            if fn is None:
                continue
            env = self.bind(fn, call, frame) if method == "__init__" else {}
            env["self"] = frozenset({Inst(cls)})
            after = self.enter(fn, call, state if method == "__init__" else result, frame, bound=env)
            result = after if method == "__init__" else _unique(result + after)
        return result

    def _back(self, exit_state: State, state: State, step: Step) -> State:
        """The caller's state after a call: its own contexts where the callee left them, the callee's new ones as
        having returned through `step`."""
        mine = {c.key: c for c in state}
        return _unique(mine.get(c.key) or c.returned_through(step) for c in exit_state)

    def record(self, module: ModuleInfo, qualname: str, node: ast.AST, state: State, across: bool) -> None:
        reach = self.reached.get((module.path, qualname))
        if reach is None:
            reach = self.reached[(module.path, qualname)] = Reach(module, qualname, node)
        reach.across_modules |= across
        for context in state:
            reach.contexts.setdefault(context.key, context)

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

    def _is_keras_class(self, cls: ClassInfo, depth: int = 0) -> bool:
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
                if isinstance(value, Cls) and value.cls is not cls and self._is_keras_class(value.cls, depth + 1):
                    return True
        return False

    def _dynamic(self, call: ast.Call, state: State, frame: Frame) -> None:
        """Say (for --verbose) where a low-precision policy meets a call resolved only at run time."""
        if not any(c.low_precision for c in state):
            return
        func = call.func
        dynamic = False
        if isinstance(func, ast.Call):
            inner = func.func
            dynamic = (isinstance(inner, ast.Name) and inner.id in _DYNAMIC) or (
                frame.import_map.resolve(inner) in _DYNAMIC_CANONICAL
            )
        elif isinstance(func, ast.Subscript):
            dynamic = True
        elif isinstance(func, ast.Name) and func.id in _DYNAMIC:
            dynamic = func.id in ("eval", "exec", "__import__")
        elif frame.import_map.resolve(func) in _DYNAMIC_CANONICAL:
            dynamic = True
        if dynamic:
            self.note(
                frame.module,
                call.lineno,
                f"`{_segment(call, 60)}` is resolved at run time: what it reaches is checked file by file, without "
                "the policy in force here",
            )

    def note(self, module: ModuleInfo, line: int, text: str) -> None:
        key = (module.path, line, text)
        if key not in self._noted:
            self._noted.add(key)
            self.notes.append(f"{module.shown}:{line}: {text}")

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
            return _merge(
                _with_condition(self.value(node.body, frame, depth + 1), condition),
                _with_condition(self.value(node.orelse, frame, depth + 1), _negate(condition)),
            )
        if isinstance(node, ast.BoolOp):
            return _merge(*(self.value(v, frame, depth + 1) for v in node.values))
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
        if not found and node.attr in self.flags and _flag_like(node.value):
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
        return self._import_value(module, *binding, depth)

    def _import_value(self, module: ModuleInfo, node: ast.AST, alias: ast.alias, depth: int) -> Values:
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
            key_text = repr(key.value) if isinstance(key, ast.Constant) else _segment(key, 30)
            values = self.value(value, frame, depth + 1)
            if any(isinstance(v, (Func, Cls, Pol)) for v in values):
                items.append((key_text, values))
        return frozenset({Registry(tuple(items))}) if items else frozenset()

    def _lookup_key(
        self, containers: Values, key: ast.AST, default: ast.AST | None, frame: Frame, depth: int
    ) -> Values:
        """`REGISTRY[key]` / `REGISTRY.get(key, default)`: every value the key may select (a policy keeps the key
        as its condition)."""
        found: list[Values] = []
        flag = self.flags.get(key.attr) if isinstance(key, ast.Attribute) and _flag_like(key.value) else None
        for container in containers:
            if not isinstance(container, Registry):
                continue
            for item_key, values in container.items:
                if flag is not None:
                    when = f"when {flag.option} {item_key.strip(chr(39) + chr(34))} is given"
                else:
                    when = f"when {_segment(key, 40)} is {item_key}"
                found.append(_with_condition(values, when))
        if found and default is not None:
            found.append(self.value(default, frame, depth + 1))
        return _merge(*found) if found else frozenset()

    def _call_value(self, node: ast.Call, frame: Frame, depth: int) -> Values:
        name = frame.import_map.resolve(node.func)
        if name in POLICY_CONSTRUCTORS:
            arg = node.args[0] if node.args else _keyword(node, "name")
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
        return _merge(*found) if found else frozenset()

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
                found.append(_with_condition(values, _join(*conditions, where) if conditions else ""))
            return _merge(*found) if found else frozenset()
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

    def condition(self, test: ast.AST, frame: Frame) -> str:
        """`when --amp is given`, `when --precision fp16 is given`, `when args.fp16 and ...`."""
        negated = False
        while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, negated = test.operand, not negated
        text = None
        if isinstance(test, ast.Attribute) and test.attr in self.flags and _flag_like(test.value):
            flag = self.flags[test.attr]
            text = f"when {flag.option} is given" if flag.boolean else f"when {flag.option} is set"
        elif (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
            and isinstance(test.left, ast.Attribute)
            and test.left.attr in self.flags
            and isinstance(test.comparators[0], ast.Constant)
        ):
            flag = self.flags[test.left.attr]
            text = f"when {flag.option} {test.comparators[0].value} is given"
            negated ^= isinstance(test.ops[0], ast.NotEq)
        elif isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq)):
            # `if dtype == tf.float16:` where `dtype` holds policies chosen by a flag: the flag's condition
            bound = {v.policy: v.condition for v in self.value(test.left, frame) if isinstance(v, Pol) and v.condition}
            wanted = [v.policy for v in self.value(test.comparators[0], frame) if isinstance(v, Pol)]
            if len(wanted) == 1 and wanted[0] in bound:
                text = bound[wanted[0]]
                negated ^= isinstance(test.ops[0], ast.NotEq)
        text = text or f"when `{_segment(test, 60)}`"
        return _negate(text) if negated else text


def _negate(condition: str) -> str:
    if not condition:
        return ""
    if condition.startswith("unless "):
        return "when " + condition[len("unless ") :]
    if condition.startswith("when "):
        return "unless " + condition[len("when ") :]
    return f"unless ({condition})"


def _returns(body: list[ast.stmt], conditions: list[str], frame: Frame, analysis: Analysis) -> Iterator:
    """(returned expression, conditions of the branches it is in) for every return of a function body."""
    for stmt in body:
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            yield stmt.value, conditions
        elif isinstance(stmt, ast.If):
            condition = analysis.condition(stmt.test, frame)
            yield from _returns(stmt.body, [*conditions, condition], frame, analysis)
            yield from _returns(stmt.orelse, [*conditions, _negate(condition)], frame, analysis)
        elif isinstance(stmt, (ast.For, ast.While, ast.With, ast.Try)):
            for block in [stmt.body, getattr(stmt, "orelse", []), *(h.body for h in getattr(stmt, "handlers", []))]:
                yield from _returns(block, conditions, frame, analysis)


def _flag_like(node: ast.AST) -> bool:
    """`FLAGS.x`, `args.x`, `self.args.x`, `flags.FLAGS.x`: an object that holds command-line options."""
    while isinstance(node, ast.Attribute):
        if node.attr in _FLAG_ROOTS:
            return True
        node = node.value
    return isinstance(node, ast.Name) and (node.id in _FLAG_ROOTS or node.id.endswith(("args", "flags", "FLAGS")))


def _is_main_guard(test: ast.AST) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def _is_static(node: ast.AST) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)


def _segment(node: ast.AST, limit: int) -> str:
    try:
        text = ast.unparse(node)
    except Exception:
        return "..."
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _env_key(env: dict[str, Values]) -> frozenset:
    return frozenset((name, values) for name, values in env.items())


def _calls_in_order(node: ast.AST) -> list[ast.Call]:
    """Calls inside `node` in evaluation order (a call after the calls in its arguments); lambdas, nested function
    and class bodies are not entered (they run later, if at all)."""
    found: list[ast.Call] = []

    def visit(current: ast.AST) -> None:
        for child in ast.iter_child_nodes(current):
            if isinstance(child, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            visit(child)
        if isinstance(current, ast.Call):
            found.append(current)

    if isinstance(node, ast.stmt):
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.stmt):
                visit(child)
    else:
        visit(node)
    return found


# ------------------------------------------------------------------------------------------------ the result


@dataclass
class Builder:
    """A reached function or class that constructs Keras layers or models, with its contexts (--show-contexts)."""

    shown: str
    line: int
    qualname: str
    contexts: tuple[PolicyContext, ...]
    across_modules: bool


@dataclass
class Project:
    """What the project analysis found for one project root."""

    root: str
    contexts: dict[str, FileContexts]  # by absolute path
    builders: list[Builder]
    notes: list[str]
    sources: dict[str, tuple[str, ast.Module]]  # parsed once, handed to the per-file pass (take_source)
    parsed: int = 0  # modules the analysis parsed
    entries: int = 0  # entry points it started from

    def file_contexts(self, path: str) -> FileContexts | None:
        return self.contexts.get(path)

    def take_source(self, path: str) -> tuple[str, ast.Module] | None:
        """The text and tree parsed for `path` (given once: the per-file pass drops it after its check)."""
        return self.sources.pop(path, None)


def parse(text: str, filename: str) -> ast.Module | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(text, filename=filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


class _Modules:
    """The project's modules, parsed when the walk first needs one (most of a big tree never is)."""

    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis
        self.loaded: dict[str, ModuleInfo | None] = {}

    def get(self, path: str) -> ModuleInfo | None:
        if path in self.loaded:
            return self.loaded[path]
        analysis = self.analysis
        module = None
        if path in analysis.resolver.files:
            text = TEXTS.pop(path, None)  # read by this run's scan already
            try:
                text = text if text is not None else read_source(Path(path))
            except (OSError, UnicodeDecodeError, SyntaxError):
                text = None
            tree = parse(text, analysis.shown(path)) if text is not None else None
            if tree is None and text is not None:
                analysis.notes.append(f"{analysis.shown(path)}: does not parse: the project analysis goes around it")
            if tree is not None:
                module = ModuleInfo(path, analysis.shown(path), text, tree)
                if path in analysis.checked:
                    analysis.sources[path] = (text, tree)
                if path in analysis.files.flag_files:
                    analysis.flags.update(_flag_definitions(module))
        self.loaded[path] = module
        return module

    def __contains__(self, path: str) -> bool:
        return self.get(path) is not None

    def __getitem__(self, path: str) -> ModuleInfo:
        module = self.get(path)
        if module is None:
            raise KeyError(path)
        return module


def analyse(files: ProjectFiles, checked: set[str], shown: Callable[[str], str]) -> Project:
    """Interpret the entry points (parsing the modules they reach, once), and keep for every file the contexts of
    the scopes reached from another module."""
    analysis = Analysis(files, shown, checked)
    analysis.run()
    contexts: dict[str, FileContexts] = {}
    builders = []
    for (path, qualname), reach in analysis.reached.items():
        ordered = tuple(sorted(reach.contexts.values(), key=_context_order))
        if reach.builds:
            line = getattr(reach.node, "lineno", 1)
            builders.append(Builder(reach.module.shown, line, qualname, ordered, reach.across_modules))
        if reach.across_modules:
            file = contexts.setdefault(path, FileContexts(sets_policy=path in files.setters))
            file.scopes[qualname] = ordered
    classes = {(b.shown, b.qualname) for b in builders}
    # A constructed class is listed once: its __init__/build/call run under the same contexts.
    builders = [b for b in builders if (b.shown, b.qualname.rpartition(".")[0]) not in classes]
    builders.sort(key=lambda b: (b.shown, b.line, b.qualname))
    parsed = sum(1 for m in analysis.modules.loaded.values() if m is not None)
    return Project(files.root, contexts, builders, analysis.notes, analysis.sources, parsed, len(files.entries))


def _context_order(context: PolicyContext) -> tuple:
    return (context.origin is not None, context.policy or "", str(context.origin or ""), context.condition)
