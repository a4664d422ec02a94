"""The single place rules are registered.

A rule module under ``mpdoctor.rules`` declares each code once with :func:`define_rule` and, when the static pass
can raise it, decorates its check with :func:`static_check`. Nothing else lists codes: the CLI table, ``explain``,
SARIF ``driver.rules`` and code selection are all generated from here.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass
from typing import Callable

from mpdoctor.diagnostics import Severity

CODE_PATTERN = re.compile(r"^MP\d{3}$")
PASS_LETTERS = ("S", "T", "A")


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    passes: str  # subset of "STA" in that order, e.g. "ST"
    fixable: bool
    summary: str  # one line, shown by `mpdoctor rules`
    what: str
    why: str
    bad: str
    good: str
    fix: str

    @property
    def pass_names(self) -> tuple[str, ...]:
        from mpdoctor.diagnostics import PASS_NAMES

        return tuple(PASS_NAMES[p] for p in self.passes)


_RULES: dict[str, Rule] = {}
_STATIC_CHECKS: dict[str, "StaticCheck"] = {}
_TRACE_CHECKS: dict[str, tuple[tuple[str, ...], Callable]] = {}
_loaded = False


def define_rule(code: str, name: str, severity: str, passes: str, fixable: bool, *, summary: str, what: str,
                why: str, bad: str, good: str, fix: str) -> Rule:
    if not CODE_PATTERN.match(code):
        raise ValueError(f"bad rule code {code!r}")
    if code in _RULES:
        raise ValueError(f"rule code {code} defined twice")
    if any(r.name == name for r in _RULES.values()):
        raise ValueError(f"rule name {name!r} defined twice")
    if not passes or any(p not in PASS_LETTERS for p in passes):
        raise ValueError(f"{code}: bad passes {passes!r}")
    rule = Rule(code, name, Severity(severity), passes, fixable, summary, _dedent(what), _dedent(why),
                _dedent(bad), _dedent(good), _dedent(fix))
    _RULES[code] = rule
    return rule


# Most rules need float16/bfloat16 compute, which no file can have without spelling one of these.
FLOAT16_TEXT = r"float16|half"


@dataclass(frozen=True)
class StaticCheck:
    codes: tuple[str, ...]
    fn: Callable
    requires: tuple[re.Pattern, ...]  # the check cannot fire on a file whose text misses one (cheap early skip)

    def may_fire(self, text: str, float16_assumed: bool, seen: dict[str, bool]) -> bool:
        """`seen` caches pattern -> found for one file (checks share patterns)."""
        for pattern in self.requires:
            if float16_assumed and pattern.pattern == FLOAT16_TEXT:
                continue
            if pattern.pattern not in seen:
                seen[pattern.pattern] = pattern.search(text) is not None
            if not seen[pattern.pattern]:
                return False
        return True


def _check_codes(codes: tuple[str, ...], letter: str, kind: str) -> None:
    """A check may only raise defined codes whose rule lists its pass."""
    for code in codes:
        if code not in _RULES:
            raise ValueError(f"{kind} check for undefined rule {code}")
        if letter not in _RULES[code].passes:
            raise ValueError(f"{code} is not a {kind} rule")


def static_check(*codes: str, requires: str | tuple[str, ...] = FLOAT16_TEXT) -> Callable[[Callable], Callable]:
    """Register a static check ``fn(ctx) -> Iterable[Diagnostic]`` that may raise the given codes.

    `requires`: regexes that the text of any file the check can fire on matches, every one of them. A necessary
    condition (the spelling of an API the rule is about), never a heuristic. `FLOAT16_TEXT` is waived when the
    configuration assumes a float16 policy.
    """

    def register(fn: Callable) -> Callable:
        _check_codes(codes, "S", "static")
        patterns = tuple(re.compile(r) for r in ((requires,) if isinstance(requires, str) else requires))
        _STATIC_CHECKS[fn.__module__ + "." + fn.__qualname__] = StaticCheck(codes, fn, patterns)
        return fn

    return register


def trace_check(*codes: str) -> Callable[[Callable], Callable]:
    """Register a trace check ``fn(facts: dict, ctx: TraceContext) -> Iterable[Diagnostic]`` (pure: facts only)."""

    def register(fn: Callable) -> Callable:
        _check_codes(codes, "T", "trace")
        _TRACE_CHECKS[fn.__module__ + "." + fn.__qualname__] = (codes, fn)
        return fn

    return register


def trace_checks() -> list[tuple[tuple[str, ...], Callable]]:
    load_rules()
    return [_TRACE_CHECKS[k] for k in sorted(_TRACE_CHECKS)]


# Raised by the engine itself rather than by a registered check.
_ENGINE_CODES = frozenset({"MP001", "MP002"})


def implemented_codes() -> set[str]:
    """Codes some pass of this version can raise (the others are defined in the contract, not yet checked)."""
    load_rules()
    codes = set(_ENGINE_CODES)
    for check in _STATIC_CHECKS.values():
        codes.update(check.codes)
    for codes_of_check, _ in _TRACE_CHECKS.values():
        codes.update(codes_of_check)
    return codes


def load_rules() -> None:
    global _loaded
    if _loaded:
        return
    import mpdoctor.rules as package

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        importlib.import_module(f"{package.__name__}.{info.name}")
    _loaded = True


def all_rules() -> list[Rule]:
    load_rules()
    return [_RULES[c] for c in sorted(_RULES)]


def get_rule(code: str) -> Rule:
    load_rules()
    return _RULES[code]


def static_checks() -> list[StaticCheck]:
    load_rules()
    return [_STATIC_CHECKS[k] for k in sorted(_STATIC_CHECKS)]


def expand_selector(selector: str) -> set[str]:
    """`MP4` -> every MP4xx code; `MP401` -> itself; `ALL` -> everything. Unknown -> ValueError."""
    load_rules()
    sel = selector.strip().upper()
    if sel == "ALL":
        return set(_RULES)
    if not re.fullmatch(r"MP\d{0,3}", sel):
        raise ValueError(f"unknown rule selector {selector!r} (expected a code such as MP401 or a prefix such as MP4)")
    matched = {c for c in _RULES if c.startswith(sel)}
    if not matched:
        raise ValueError(f"unknown rule selector {selector!r}: no rule code starts with it")
    return matched


def _dedent(text: str) -> str:
    import textwrap

    return textwrap.dedent(text).strip("\n")
