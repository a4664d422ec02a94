"""The values the project analysis follows through a project's code (policies, flags, functions, classes, modules,
registries), each policy with the condition under which it holds, and the frame of the function being interpreted."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from mpdoctor.project.modules import ClassInfo, FunctionInfo, ModuleInfo
from mpdoctor.static.names import ImportMap
from mpdoctor.static.policy_context import MODULE_SCOPE

_MAX_VALUES = 32  # alternatives kept for one value


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
class Built:
    """What a call into a project function that constructs Keras layers or models returned (`model = load_model()`):
    a model built under `policies`, the ones in force at that call (issue 29: a policy set later misses it)."""

    where: str  # "load_model() (pkg/model.py:5), called at main.py:7"
    policies: tuple[str | None, ...]


@dataclass(frozen=True)
class Mod:
    path: str  # a module file, or a package directory


@dataclass(frozen=True)
class Registry:
    """A dict literal whose values are functions, classes or policies: `MODELS = {"resnet": build_resnet}`."""

    items: tuple[tuple[str, frozenset], ...]


Values = frozenset


def merge_values(*values: Values) -> Values:
    """Any of the alternatives (at most _MAX_VALUES of them are kept)."""
    merged = frozenset().union(*values)
    return merged if len(merged) <= _MAX_VALUES else frozenset(list(merged)[:_MAX_VALUES])


def with_condition(values: Values, condition: str) -> Values:
    """The values, their policies holding only under `condition` as well."""
    if not condition:
        return values
    return frozenset(
        Pol(v.policy, join_conditions(condition, v.condition)) if isinstance(v, Pol) else v for v in values
    )


def join_conditions(*conditions: str) -> str:
    """`when A` + `when B` -> `when A and B` (each part once)."""
    parts: list[str] = []
    for condition in conditions:
        for part in condition.split(" and ") if condition else ():
            if parts and part.startswith("when "):
                part = part[len("when ") :]
            if part and part not in parts and f"when {part}" not in parts:
                parts.append(part)
    return " and ".join(parts)


def negate(condition: str) -> str:
    """`when A` -> `unless A` and back."""
    if not condition:
        return ""
    if condition.startswith("unless "):
        return "when " + condition[len("unless ") :]
    if condition.startswith("when "):
        return "unless " + condition[len("when ") :]
    return f"unless ({condition})"


def source_segment(node: ast.AST, limit: int) -> str:
    """An expression as conditions and notes quote it: on one line, at most `limit` characters."""
    try:
        text = ast.unparse(node)
    except Exception:
        return "..."
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
