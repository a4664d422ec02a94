"""Policy contexts: under which dtype policy a function of a project runs, and how the project analysis knows it.

A context is one global policy in force when some entry point of the project reaches a function: where it was set
(`train.py:14`), under which condition (`when --amp is given`), and the calls that lead from there to the function.
The project analysis (mpdoctor.project.analysis) finds them; the static pass of each file (its SemanticModel) uses their
policies; findings that exist only because of them name the context once and carry its path in the JSON.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace

from mpdoctor.diagnostics import DiagnosticContext
from mpdoctor.facts.dtypes import is_float16_compute

MODULE_SCOPE = "<module>"  # the qualname of a module's top-level code
_MAX_PATH = 24  # steps kept in a context's path (a longer chain keeps its beginning and its end)

# Which low-precision policy the trace runs a module under when several contexts reach it: float16 first (its range
# is the narrow one), then bfloat16; pure policies after the mixed ones they are usually a mistake of (MP102).
TRACE_PREFERENCE = ("mixed_float16", "float16", "mixed_bfloat16", "bfloat16")


@dataclass(frozen=True)
class Step:
    """One place on a context's path: where the policy was set, or a call on the way to the function."""

    file: str  # display path
    line: int
    what: str  # `set_global_policy("mixed_float16")`, `build_classifier()`, `entry point`

    def __str__(self) -> str:
        return f"{self.file}:{self.line} {self.what}"


@dataclass(frozen=True)
class PolicyContext:
    policy: str | None  # None: set to a value the static pass cannot know
    origin: Step | None  # the call that set it; None: nothing was set (Keras's default, float32)
    condition: str = ""  # "when --amp is given" ("" when unconditional)
    path: tuple[Step, ...] = field(default=(), compare=False)  # from the origin (or the entry) to the function
    origin_steps: int = field(default=0, compare=False)  # leading steps of `path` that lead to the origin
    entry: str = field(default="", compare=False)  # the entry point's file (absolute): where the program starts
    # Other contexts of the same policy a finding is named with (several entry points reach its code): their origins
    # are said too, none picked as the one
    also: tuple[PolicyContext, ...] = field(default=(), compare=False)

    @property
    def key(self) -> tuple:
        return (self.policy, self.origin, self.condition)

    @property
    def low_precision(self) -> bool:
        return is_float16_compute(self.policy)

    def then(self, step: Step) -> PolicyContext:
        """This context one call further."""
        path = self.path + (step,)
        if len(path) > _MAX_PATH:
            path = path[: _MAX_PATH // 2] + path[-_MAX_PATH // 2 :]
        return PolicyContext(self.policy, self.origin, self.condition, path, self.origin_steps, self.entry)

    def returned_through(self, step: Step) -> PolicyContext:
        """A context set inside a called function, back in the caller after `step` (the call) returned: the calls
        made inside after the policy was set do not lead to what the caller does next."""
        route = self.path[: self.origin_steps] + (step,)
        return PolicyContext(self.policy, self.origin, self.condition, route, len(route), self.entry)

    def describe(self) -> str:
        """`under mixed_float16, set in train.py:14 when --amp is given` (what a finding's message names)."""
        if self.origin is None:
            return f"under {self.policy or 'float32'} (no policy set)"
        policy = self.policy or "a policy whose value is not known statically"
        return f"under {policy}, {self.set_in()}"

    def set_in(self) -> str:
        """`set in train.py:14 when --amp is given` (where the policy comes from; with an origin only); with
        `also`: `set in a.py:3, or in b.py:5 when --amp is given`."""
        return "set in " + ", or in ".join(c._where() for c in (self, *self.also))

    def _where(self) -> str:
        where = f"{self.origin.file}:{self.origin.line}" if self.origin else "?"
        return where + (f" {self.condition}" if self.condition else "")

    def route(self) -> str:
        """`train.py:14 set_global_policy("mixed_float16") -> train.py:16 build_classifier()`."""
        return " -> ".join(str(step) for step in self.path)

    def for_diagnostic(self) -> DiagnosticContext:
        return DiagnosticContext(
            policy=self.policy,
            set_at=f"{self.origin.file}:{self.origin.line}" if self.origin else None,
            condition=self.condition or None,
            path=tuple(str(step) for step in self.path),
        )


def trace_order(policy: str | None) -> int:
    return TRACE_PREFERENCE.index(policy) if policy in TRACE_PREFERENCE else len(TRACE_PREFERENCE)


@dataclass
class FileContexts:
    """The contexts the project analysis found for the scopes of one file, by qualname (`build_classifier`, `Net`,
    `Net.call`, `main.<locals>.build`, MODULE_SCOPE). A scope missing here was not reached from any entry point:
    the per-file analysis alone decides its policy."""

    scopes: dict[str, tuple[PolicyContext, ...]] = field(default_factory=dict)
    sets_policy: bool = False  # the file sets a policy itself (the trace then runs it as it is)
    # Every scope of the file the walk reached, from this module too (`scopes` holds those reached from another
    # module only): which code entry points run under which contexts, for naming what the trace saw in it
    reached: dict[str, tuple[PolicyContext, ...]] = field(default_factory=dict)
    # (qualname, parameter): a model a caller in another module built before the call, (where, its policies)
    built_arguments: dict[tuple[str, str], tuple[str, tuple[str | None, ...]]] = field(default_factory=dict)

    def policies(self, qualname: str) -> frozenset[str | None]:
        return frozenset(c.policy for c in self.scopes.get(qualname, ()))

    @property
    def low_precision(self) -> bool:
        return any(c.low_precision for contexts in self.scopes.values() for c in contexts)

    def context_for(self, qualnames: list[str], message: str) -> PolicyContext | None:
        """The low-precision context a finding inside the innermost of `qualnames` (innermost first) is reported
        under: the one whose policy its message names, else the first in trace order (with the others of that
        policy: each origin is named)."""
        for qualname in qualnames:
            low = [c for c in self.scopes.get(qualname, ()) if c.low_precision]
            if low:
                named = [c for c in low if c.policy and c.policy in message]
                chosen = min(named or low, key=lambda c: (trace_order(c.policy), c.origin is None))
                return _grouped([c for c in low if c.policy == chosen.policy])
        return None

    def trace_context(self) -> PolicyContext | None:
        """The context the trace runs this module under: a library module (it sets no policy itself) whose code some
        entry point reaches under a low-precision policy."""
        if self.sets_policy:
            return None
        low = [c for contexts in self.scopes.values() for c in contexts if c.low_precision]
        return min(low, key=lambda c: trace_order(c.policy)) if low else None

    def traced_finding_context(self, qualnames: list[str] | None, traced: PolicyContext) -> PolicyContext | None:
        """The context a trace finding is named with, the trace having run this module under `traced` (its
        trace_context): the contexts of `traced`'s policy that reach the innermost function or class around the
        finding the entry points reach (`qualnames`, innermost first; None: the finding is in another file), each
        origin said when several entry points reach it. None: that function never runs under that policy (the
        finding exists only because the trace ran the whole module under a policy meant for other code of it; a
        function no entry point calls is checked as it is, like its static pass)."""
        defined = [q for q in qualnames or () if q != MODULE_SCOPE]
        if defined and defined[-1] not in self.reached:
            return None  # a top-level function or class no entry point runs
        for qualname in defined:
            contexts = self.reached.get(qualname)
            if contexts:
                return _grouped([c for c in contexts if c.policy == traced.policy])
        # The top level (an import that failed, a model built at import): as it was imported, else as it was run
        imported = [c for c in self.reached.get(MODULE_SCOPE, ()) if c.policy == traced.policy]
        module = [c for contexts in self.scopes.values() for c in contexts if c.policy == traced.policy]
        return _grouped(imported) or _grouped(module) or traced

    def untraced_policies(self, qualnames: list[str] | None, traced: PolicyContext) -> str | None:
        """A note for a trace finding whose code entry points also run under other low-precision policies than
        the one the trace ran it under (`mixed_bfloat16, set in b.py:5`): the run saw one of them only."""
        for qualname in qualnames or ():
            contexts = self.reached.get(qualname)
            if contexts:
                others = [c for c in contexts if c.low_precision and c.policy != traced.policy]
                policies = sorted({c.policy for c in others if c.policy}, key=trace_order)
                if not policies:
                    return None
                described = "; ".join(
                    f"{policy}, {g.set_in()}"
                    for policy in policies
                    if (g := _grouped([c for c in others if c.policy == policy])) is not None
                )
                return f"entry points also run this code under {described}: the trace ran it under {traced.policy} only"
        return None


def _grouped(contexts: list[PolicyContext]) -> PolicyContext | None:
    """The first of `contexts` (in trace order), naming the others' origins too; None for none."""
    unique = list({c.key: c for c in contexts}.values())
    if not unique:
        return None
    unique.sort(key=lambda c: (c.origin is None, str(c.origin or ""), c.condition))
    return replace(unique[0], also=tuple(unique[1:]))


def scopes_at(tree: ast.Module, line: int) -> list[str]:
    """Qualnames of the functions and classes around `line`, innermost first, then the module's (MODULE_SCOPE)."""
    found: list[str] = []
    body, prefix = tree.body, ""
    while True:
        inner = next(
            (
                n
                for n in body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.lineno <= line <= (n.end_lineno or n.lineno)
            ),
            None,
        )
        if inner is None:
            break
        name = prefix + inner.name
        found.append(name)
        body = inner.body
        prefix = f"{name}." if isinstance(inner, ast.ClassDef) else f"{name}.<locals>."
    return [*reversed(found), MODULE_SCOPE]
