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

This module is the walk through statements and calls; what an expression may evaluate to is
mpdoctor.project.evaluation (its values: mpdoctor.project.values), the modules it reads mpdoctor.project.modules,
and where it starts mpdoctor.project.discovery.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from typing import Any

from mpdoctor.facts.keras_semantics import builds_model
from mpdoctor.project.discovery import ModuleResolver, ProjectFiles, is_test_module
from mpdoctor.project.evaluation import Evaluator
from mpdoctor.project.modules import ClassInfo, FunctionInfo, ModuleInfo, ModuleLoader, import_bindings
from mpdoctor.project.values import (
    Built,
    Cls,
    Frame,
    Func,
    Inst,
    Pol,
    Values,
    join_conditions,
    merge_values,
    negate,
    source_segment,
    with_condition,
)
from mpdoctor.static.names import ImportMap
from mpdoctor.static.policies import POLICY_SETTERS
from mpdoctor.static.policy_context import MODULE_SCOPE, FileContexts, PolicyContext, Step

_BUDGET = 400_000  # statements interpreted per run: a pathological project stops here (and says so)
_MAX_DEPTH = 1_000  # nested calls followed (the walk is iterative: the budget is what bounds it)
_LIFECYCLE = ("__init__", "build", "call", "__call__")  # what a constructed Keras layer runs with its policy
_DYNAMIC = {"getattr", "__import__", "eval", "exec", "globals", "locals", "vars"}
_DYNAMIC_CANONICAL = ("importlib.import_module",)


State = tuple  # of PolicyContext, unique by key
# One step of the walk (a block, a statement, a call...) as a generator: it yields the nested steps it needs (or a
# State already known) and gets their resulting State back; it returns its own. `_drive` runs them with a stack of
# its own, so a chain of 250 modules calling one another nests no Python frames (it used to: RecursionError).
Walk = Generator[Any, State, State]


def _drive(walk: Walk | State) -> State:
    """Run a step of the walk and every step it nests, depth first, on an explicit stack."""
    if isinstance(walk, tuple):
        return walk
    stack = [walk]
    result: State | None = None
    failure: BaseException | None = None
    while True:
        try:
            if failure is not None:
                nested = stack[-1].throw(failure)  # through the step's own try/finally
                failure = None
            else:
                nested = stack[-1].send(result)  # type: ignore[arg-type]
        except StopIteration as done:
            stack.pop()
            if not stack:
                return done.value
            result = done.value
            continue
        except BaseException as exc:
            stack.pop()
            if not stack:
                raise
            failure = exc
            continue
        if isinstance(nested, tuple):  # a step that needed no walk: its State at once
            result = nested
        else:
            stack.append(nested)
            result = None


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
    built_arguments: dict[str, Built] = field(default_factory=dict)  # parameters given a model built by a caller
    built_under: dict[tuple, PolicyContext] = field(default_factory=dict)  # contexts in force where it builds


class Analysis:
    """The walk: interprets the entry points' statements in order and records the contexts every function and class
    it reaches runs under."""

    def __init__(self, files: ProjectFiles, shown: Callable[[str], str], checked: set[str]) -> None:
        self.files = files
        self.resolver = ModuleResolver(files.root, files.files)
        self.shown = shown
        self.checked = checked
        self.notes: list[str] = []
        self.modules = ModuleLoader(self.resolver, files.flag_files, shown, checked, self.notes)
        self.sources = self.modules.sources  # what the per-file pass may reuse
        self.evaluator = Evaluator(self.modules)
        self.reached: dict[tuple[str, str], Reach] = {}
        self._noted: set[tuple] = set()
        self._memo: dict[tuple, State] = {}
        self._active: set[int] = set()
        self._imported: dict[str, dict[frozenset, State]] = {}
        self.budget = _BUDGET

    # ---------------------------------------------------------------- entry points

    def run(self) -> None:
        for path in self.files.entries:
            module = self.modules.get(path)
            if module is None:
                continue
            entry = module.step(1, "entry point")
            state = (PolicyContext("float32", None, "", (entry,), 0, path),)
            after = _drive(self._run_module(module, state))
            if is_test_module(path, self.files.root):
                _drive(self._run_tests(module, after))
            if self.budget <= 0:
                self.note(module, 1, "the project is too large to follow every call: the analysis stopped early")
                break

    def _run_tests(self, module: ModuleInfo, state: State) -> Walk:
        """pytest calls a test module's `test_*` functions (and `Test*` classes' methods) after importing it."""
        tests = [d for name, d in module.defs.items() if name.startswith("test") and isinstance(d, FunctionInfo)]
        for name, cls in module.defs.items():
            if name.startswith("Test") and isinstance(cls, ClassInfo):
                tests += [m for method, m in cls.methods.items() if method.startswith("test")]
        frame = Frame(module, None, {})
        for test in tests:
            step = module.step(test.node.lineno, f"pytest runs {test.qualname}()")
            yield self.enter(test, None, state, frame, bound={}, step=step)
        return state

    def _run_module(self, module: ModuleInfo, state: State) -> Walk | State:
        """A module's top level run under `state`, once per state: imported again under it (by another entry point,
        which is another program), the policies its first run left in force (`import pkg.amp`)."""
        key = frozenset(c.key for c in state)
        done = self._imported.setdefault(module.path, {})
        if id(module) in self._active:
            return state
        if key in done:
            return self._back_from_import(done[key], state)
        done[key] = state  # a cycle back into it meets the state it started with
        return self._module_body(module, state, key)

    def _module_body(self, module: ModuleInfo, state: State, key: frozenset) -> Walk:
        self._active.add(id(module))
        try:
            after = yield self.block(module.tree.body, state, Frame(module, None, {}))
        finally:
            self._active.discard(id(module))
        self._imported[module.path][key] = after
        return after

    @staticmethod
    def _back_from_import(after: State, state: State) -> State:
        """The importer's own contexts where the import left them (their paths are its own), the module's new ones."""
        mine = {c.key: c for c in state}
        entry = state[0].entry if state else ""
        return _unique(mine.get(c.key) or replace(c, entry=entry) for c in after)

    # ---------------------------------------------------------------- statements

    def block(self, body: list[ast.stmt], state: State, frame: Frame) -> Walk:
        for stmt in body:
            self.budget -= 1
            if self.budget <= 0:
                return state
            state = yield self.statement(stmt, state, frame)
        return state

    def statement(self, stmt: ast.stmt, state: State, frame: Frame) -> Walk | State:
        if isinstance(stmt, ast.If):
            return self._if(stmt, state, frame)
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            return self._loop(stmt, state, frame)
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            return self._with(stmt, state, frame)
        if isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            return self._try(stmt, state, frame)
        if isinstance(stmt, ast.Match):
            return self._match(stmt, state, frame)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            qualname = f"{frame.scope_qualname()}.<locals>.{stmt.name}" if frame.function else stmt.name
            frame.env[stmt.name] = frozenset({Func(self._local_function(frame, stmt, qualname))})
            return state
        if isinstance(stmt, ast.ClassDef):
            return state
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            return self.import_statement(stmt, state, frame)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            return self._assignment(stmt, state, frame)
        return self.expression(stmt, state, frame)

    def _assignment(self, stmt: ast.Assign | ast.AnnAssign, state: State, frame: Frame) -> Walk:
        before = state
        state = yield self.expression(stmt, state, frame)
        self._assign(stmt, frame)
        self._bind_built(stmt, before, frame)
        return state

    def _bind_built(self, stmt: ast.Assign | ast.AnnAssign, state: State, frame: Frame) -> None:
        """`model = load_model()` with `load_model` a project function that builds: the name holds a model built
        under the policies in force before the call (followed into the functions it is passed to)."""
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        call = stmt.value
        if not isinstance(call, ast.Call) or len(targets) != 1 or not isinstance(targets[0], ast.Name):
            return
        for value in self.evaluator.value(call.func, frame):
            reach = self.reached.get((value.fn.module.path, value.fn.qualname)) if isinstance(value, Func) else None
            if reach is not None and reach.builds:
                where = f"{value.fn.qualname}() ({value.fn.module.shown}:{value.fn.node.lineno}), called at "
                built = Built(
                    f"{where}{frame.module.shown}:{stmt.lineno}", tuple(sorted({c.policy for c in state}, key=str))
                )
                frame.env[targets[0].id] = frame.env.get(targets[0].id, frozenset()) | {built}
                return

    def _with(self, stmt: ast.With | ast.AsyncWith, state: State, frame: Frame) -> Walk:
        for item in stmt.items:
            state = yield self.expression(item.context_expr, state, frame)
        return (yield self.block(stmt.body, state, frame))

    def _match(self, stmt: ast.Match, state: State, frame: Frame) -> Walk:
        state = yield self.expression(stmt.subject, state, frame)
        return (yield self.branches([(case.body, "") for case in stmt.cases] + [([], "")], state, frame))

    def _if(self, stmt: ast.If, state: State, frame: Frame) -> Walk:
        if _is_main_guard(stmt.test):
            return (yield self.block(stmt.body, state, frame))
        state = yield self.expression(stmt.test, state, frame)
        known = self.evaluator.none_test(stmt.test, frame)
        if known is not None:  # `if precision is None:` with `precision` a known string: one branch runs
            return (yield self.block(stmt.body if known else stmt.orelse, state, frame))
        condition = self.evaluator.condition(stmt.test, frame)
        return (
            yield self.branches(
                [(stmt.body, condition), (stmt.orelse, negate(condition) if stmt.orelse else "")], state, frame
            )
        )

    def _loop(self, stmt: ast.For | ast.AsyncFor | ast.While, state: State, frame: Frame) -> Walk:
        """The body may run any number of times, none included; then the `else` block."""
        state = yield self.expression(stmt.iter if not isinstance(stmt, ast.While) else stmt.test, state, frame)
        looped = yield self.branches([(stmt.body, ""), ([], "")], state, frame)
        return (yield self.block(stmt.orelse, looped, frame))

    def _try(self, stmt: ast.Try, state: State, frame: Frame) -> Walk:
        """The body, then the `else` block or a handler (from the state before or after the body), then `finally`."""
        after_body = yield self.block(stmt.body, state, frame)
        outcomes = [(yield self.block(stmt.orelse, after_body, frame))]
        for handler in stmt.handlers:
            outcomes.append((yield self.block(handler.body, _unique(state + after_body), frame)))
        return (yield self.block(stmt.finalbody, _unique(c for s in outcomes for c in s), frame))

    def _assign(self, stmt: ast.Assign | ast.AnnAssign, frame: Frame) -> None:
        """Names bound to a value the analysis follows (policies keep the conditions of the branch)."""
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        value = self.evaluator.value(stmt.value, frame)
        value = with_condition(value, join_conditions(*frame.conditions))
        for target in targets:
            if isinstance(target, ast.Name):
                frame.env[target.id] = value

    def branches(self, branches: list[tuple[list[ast.stmt], str]], state: State, frame: Frame) -> Walk:
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
            outcomes.append((yield self.block(body, state, branch)))
            envs.append(branch.env)
        for name in set().union(*envs):
            frame.env[name] = merge_values(*(env.get(name, frozenset()) for env in envs))
        return _unique(c for outcome in outcomes for c in outcome)

    def _local_function(self, frame: Frame, node: ast.AST, qualname: str) -> FunctionInfo:
        cache = frame.module.__dict__.setdefault("_local_defs", {})
        if node not in cache:
            cache[node] = FunctionInfo(frame.module, node, qualname)
        return cache[node]

    def import_statement(self, stmt: ast.Import | ast.ImportFrom, state: State, frame: Frame) -> Walk | State:
        """Importing a project module runs its top level (once per policy state, like Python's module cache)."""
        if frame.function is not None:
            frame.local_imports = [*frame.local_imports, stmt]
            frame.imports = ImportMap([*frame.module.import_nodes, *frame.local_imports])
            for local, (node, alias) in import_bindings([stmt]).items():
                frame.env[local] = self.evaluator.import_value(frame.module, node, alias, 0)
        loaded = [self.modules.get(path) for path in self._imported_paths(frame.module, stmt)]
        modules = [module for module in loaded if module is not None and module is not frame.module]
        if not modules:
            return state
        return (
            self._run_modules(modules, state)
            if frame.function is not None
            else self._top_import(modules, stmt, state, frame)
        )

    def _top_import(self, modules: list[ModuleInfo], stmt: ast.stmt, state: State, frame: Frame) -> Walk:
        """A module-level import of a module that sets a policy when imported (`import pkg.amp`): the importer's
        own top-level code runs under that policy (its per-file pass sees no policy call). Only for an import in
        the module's prologue: the per-file pass applies it to the whole module, and code before a later import
        runs without it."""
        after = yield self._run_modules(modules, state)
        before = {c.key for c in state}
        added = tuple(c for c in after if c.key not in before)
        if added and _in_prologue(frame.module.tree, stmt):
            self.record(frame.module, MODULE_SCOPE, frame.module.tree, added, across=True)
        return after

    def _run_modules(self, modules: list[ModuleInfo], state: State) -> Walk:
        for module in modules:
            self.record(module, MODULE_SCOPE, module.tree, state, across=True)
            state = yield self._run_module(module, state)
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

    def expression(self, node: ast.AST, state: State, frame: Frame) -> Walk | State:
        """Every call in `node`, arguments before the call that takes them (not inside lambdas or nested defs)."""
        calls = _calls_in_order(node)
        return self._calls(calls, state, frame) if calls else state

    def _calls(self, calls: list[ast.Call], state: State, frame: Frame) -> Walk:
        for call in calls:
            state = yield self.call(call, state, frame)
        return state

    def call(self, call: ast.Call, state: State, frame: Frame) -> Walk | State:
        name = frame.import_map.resolve(call.func)
        if name in POLICY_SETTERS:
            return self.set_policy(call, name, state, frame)
        if name and (name.startswith(("keras.", "hub.")) or builds_model(name)):
            self._note_builder(name, frame, state)
            return self._callbacks(call, state, frame)
        targets = [t for t in self.evaluator.value(call.func, frame) if isinstance(t, (Func, Cls))]
        if not targets:
            self._dynamic(call, state, frame)
            return self._callbacks(call, state, frame)
        return self._call_targets(targets, call, state, frame)

    def _call_targets(self, targets: list[Func | Cls], call: ast.Call, state: State, frame: Frame) -> Walk:
        """Any of the functions or classes the callee may be is what runs."""
        outcomes: list[State] = []
        for target in targets:
            if isinstance(target, Func):
                outcomes.append((yield self.enter(target.fn, call, state, frame)))
            else:
                outcomes.append((yield self.construct(target.cls, call, state, frame)))
        return _unique(c for outcome in outcomes for c in outcome)

    def _callbacks(self, call: ast.Call, state: State, frame: Frame) -> Walk | State:
        """Functions passed to a call the analysis does not follow (`app.run(main)`, `tf.function(fn)`) may be
        called there, under the policy in force."""
        functions = [
            value.fn
            for arg in [*call.args, *(k.value for k in call.keywords)]
            if isinstance(arg, (ast.Name, ast.Attribute))
            for value in self.evaluator.value(arg, frame)
            if isinstance(value, Func)
        ]
        return self._enter_each(functions, call, state, frame) if functions else state

    def _enter_each(self, functions: list[FunctionInfo], call: ast.Call, state: State, frame: Frame) -> Walk:
        for fn in functions:
            state = yield self.enter(fn, call, state, frame)
        return state

    def _note_builder(self, name: str, frame: Frame, state: State) -> None:
        """A call that builds Keras layers or a model (a preset too) makes its function a builder, and the contexts
        in force here the ones its model is built under (a policy its own helper set before included)."""
        last = name.rsplit(".", 1)[-1]
        if frame.function is None or not (
            name.startswith(("keras.layers.", "keras.applications.", "hub.KerasLayer"))
            or last in ("Sequential", "Model")
            or builds_model(name)
        ):
            return
        if name.startswith("keras.layers.") and not last[:1].isupper():
            return
        reach = self.reached.get((frame.module.path, frame.function.qualname))
        if reach is not None:
            reach.builds = True
            for context in state:
                reach.built_under.setdefault(context.key, context)

    def set_policy(self, call: ast.Call, name: str, state: State, frame: Frame) -> State:
        arg = call.args[0] if call.args else (call.keywords[0].value if call.keywords else None)
        values = self.evaluator.policy_values(arg, frame) if arg is not None else frozenset({Pol(None)})
        branch = join_conditions(*frame.conditions)
        origin_text = f"{name.rsplit('.', 1)[-1]}({source_segment(arg, 40) if arg is not None else ''})"
        if frame.function is not None:
            origin_text += f" in {frame.function.qualname}()"
        origin = frame.module.step(call.lineno, origin_text)
        entry = state[0].entry if state else ""
        return _unique(
            PolicyContext(value.policy, origin, join_conditions(branch, value.condition), (origin,), 1, entry)
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
    ) -> Walk | State:
        """Interpret `fn` as called at `call` under `state`; the state after it returns."""
        if frame.depth >= _MAX_DEPTH or self.budget <= 0:
            return state
        step = step or frame.module.step(call.lineno, f"{source_segment(call.func, 50)}()")
        across = fn.module is not frame.module
        inner = tuple(c.then(step) for c in state)
        self.record(fn.module, fn.qualname, fn.node, inner, across)
        env = self.evaluator.bind(fn, call, frame) if bound is None else bound
        if across:
            reach = self.reached[(fn.module.path, fn.qualname)]
            for name, values in env.items():
                built = sorted((v for v in values if isinstance(v, Built)), key=lambda b: b.where)
                if built:
                    reach.built_arguments.setdefault(name, built[0])
        key = (id(fn), frozenset(c.key for c in state), _env_key(env))
        if id(fn) in self._active:
            return state
        if key not in self._memo:
            return self._body(fn, key, Frame(fn.module, fn, env, depth=frame.depth + 1), inner, state, step)
        return self._back(self._memo[key], state, step)

    def _body(self, fn: FunctionInfo, key: tuple, callee: Frame, inner: State, state: State, step: Step) -> Walk:
        self._memo[key] = state  # a recursive call meets the entry state
        self._active.add(id(fn))
        try:
            self._memo[key] = yield self.block(fn.node.body, inner, callee)
        finally:
            self._active.discard(id(fn))
        return self._back(self._memo[key], state, step)

    def construct(self, cls: ClassInfo, call: ast.Call, state: State, frame: Frame) -> Walk:
        """`Net(...)`: the class is reached (its methods run with the policy at construction), its `__init__` (or
        an inherited one) runs now; a Keras layer's `build` and `call` run later under the same policy."""
        step = frame.module.step(call.lineno, f"{source_segment(call.func, 50)}()")
        across = cls.module is not frame.module
        self.record(cls.module, cls.qualname, cls.node, tuple(c.then(step) for c in state), across)
        if self.evaluator.is_keras_class(cls):
            reach = self.reached.get((cls.module.path, cls.qualname))
            if reach is not None:
                reach.builds = True
        result = state
        for method in _LIFECYCLE:
            fn = self.evaluator.method(cls, method)
            if fn is None:
                continue
            env = self.evaluator.bind(fn, call, frame) if method == "__init__" else {}
            env["self"] = frozenset({Inst(cls)})
            after = yield self.enter(fn, call, state if method == "__init__" else result, frame, bound=env)
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
                f"`{source_segment(call, 60)}` is resolved at run time: what it reaches is checked file by file, "
                "without the policy in force here",
            )

    def note(self, module: ModuleInfo, line: int, text: str) -> None:
        key = (module.path, line, text)
        if key not in self._noted:
            self._noted.add(key)
            self.notes.append(f"{module.shown}:{line}: {text}")


def _is_main_guard(test: ast.AST) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def _in_prologue(tree: ast.Module, stmt: ast.stmt) -> bool:
    """Only imports, docstrings and assignments of literals (`os.environ["KERAS_BACKEND"] = "jax"`) come before the
    top-level statement holding `stmt`."""
    for top in tree.body:
        if top.lineno <= stmt.lineno <= (top.end_lineno or top.lineno):
            return True
        literal = isinstance(top, (ast.Assign, ast.AnnAssign)) and isinstance(top.value, ast.Constant)
        docstring = isinstance(top, ast.Expr) and isinstance(top.value, ast.Constant)
        if not (isinstance(top, (ast.Import, ast.ImportFrom)) or literal or docstring):
            return False
    return False


def _env_key(env: dict[str, Values]) -> frozenset:
    return frozenset((name, values) for name, values in env.items())


def _calls_in_order(node: ast.AST) -> list[ast.Call]:
    """Calls inside `node` in evaluation order (a call after the calls in its arguments); lambdas, nested function
    and class bodies are not entered (they run later, if at all)."""
    found: list[ast.Call] = []
    if isinstance(node, ast.stmt):
        roots = [child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.stmt)]
    else:
        roots = [node]
    # Post-order on an explicit stack (an expression can nest thousands deep: `a.b.c...`): (node, children done).
    stack: list[tuple[ast.AST, bool]] = [(root, False) for root in reversed(roots)]
    while stack:
        current, expanded = stack.pop()
        if expanded:
            if isinstance(current, ast.Call):
                found.append(current)
            continue
        stack.append((current, True))
        children = [c for c in ast.iter_child_nodes(current) if not isinstance(c, _NOT_NOW)]
        stack += [(child, False) for child in reversed(children)]
    return found


_NOT_NOW = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)  # their bodies run later, if at all


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


def analyse(files: ProjectFiles, checked: set[str], shown: Callable[[str], str]) -> Project:
    """Interpret the entry points (parsing the modules they reach, once), and keep for every file the contexts of
    the scopes reached from another module."""
    analysis = Analysis(files, shown, checked)
    analysis.run()
    contexts: dict[str, FileContexts] = {}
    builders = []
    scopes = {key: _scope_contexts(reach) for key, reach in analysis.reached.items()}
    for (path, qualname), reach in analysis.reached.items():
        ordered = scopes[(path, qualname)]
        if reach.builds:
            line = getattr(reach.node, "lineno", 1)
            built = tuple(sorted(reach.built_under.values(), key=_context_order)) or ordered
            builders.append(Builder(reach.module.shown, line, qualname, built, reach.across_modules))
        if reach.across_modules:
            file = contexts.setdefault(path, FileContexts(sets_policy=path in files.setters))
            file.scopes[qualname] = ordered
            for name, argument in reach.built_arguments.items():
                file.built_arguments[(qualname, name)] = (argument.where, argument.policies)
    for (path, qualname), ordered in scopes.items():
        if path in contexts:
            contexts[path].reached[qualname] = ordered
    classes = {(b.shown, b.qualname) for b in builders}
    # A constructed class is listed once: its __init__/build/call run under the same contexts.
    builders = [b for b in builders if (b.shown, b.qualname.rpartition(".")[0]) not in classes]
    builders.sort(key=lambda b: (b.shown, b.line, b.qualname))
    parsed = sum(1 for m in analysis.modules.loaded.values() if m is not None)
    return Project(files.root, contexts, builders, analysis.notes, analysis.sources, parsed, len(files.entries))


def _scope_contexts(reach: Reach) -> tuple[PolicyContext, ...]:
    """The contexts a function runs under: those it is called under, and those a helper it calls sets before it
    builds (`set_precision(precision)` of the project's own package; a policy call in its own body the per-file
    pass sees itself)."""
    found = dict(reach.contexts)
    node = reach.node
    first, last = getattr(node, "lineno", 0), getattr(node, "end_lineno", 0) or 0
    for key, context in reach.built_under.items():
        origin = context.origin
        if origin is not None and origin.file == reach.module.shown and first <= origin.line <= last:
            continue
        found.setdefault(key, context)
    return tuple(sorted(found.values(), key=_context_order))


def _context_order(context: PolicyContext) -> tuple:
    return (context.origin is not None, context.policy or "", str(context.origin or ""), context.condition)
