"""The single place rules are registered, and the hooks the engine calls on them.

A rule module under `mpdoctor.rules` (one per rule, or per small family) declares each code once with
:func:`define_rule` and registers what its rule does with the decorators below:

- :func:`static_check`: `fn(ctx: StaticContext) -> Iterable[Diagnostic]`, the static pass;
- :func:`trace_check`: `fn(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]`, the trace pass;
- :func:`static_verdicts`: `fn(facts, ctx) -> {(code, line) or (code, line, column): None | (verdict, reason)}`:
  what the trace says about the rule's static findings (None withdraws one; "confirm" makes it static+trace, high
  confidence; "downgrade" makes it info, low confidence);
- :func:`exception_pattern`: `fn(message) -> dict | None`, the rule's reading of an exception text of the run
  (TensorFlow and Keras messages); the first pattern that matches, in `order`, explains the exception;
- :func:`explains_exception`: `fn(exception, facts, found) -> bool`, for rules that explain a failed run otherwise;
- :func:`absorbs_crash`: `fn(crash: Diagnostic, finding: Diagnostic) -> bool`: the rule's static `finding`, in the
  file where the trace crashed, is the cause of the crash (the MP001 is dropped: mpdoctor.crash_causes).
- :func:`unused_suppressions_check`: `fn(suppressions, shown, text, could_have_run) -> list[Diagnostic]`, run by the
  engine after suppressing: the comments that suppressed nothing.

A code the engine and the trace raise themselves is registered by its role with :func:`raised_by_engine` (the code of
a failed run): they ask :func:`engine_code` for it and import no rule module.

Nothing else lists codes: the CLI table, `explain`, SARIF `driver.rules`, code selection and the engine's merging
are all generated from here. Rule modules are imported lazily (`load_rules`), so this module imports none.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from mpdoctor.diagnostics import PASS_NAMES, Diagnostic, Severity
from mpdoctor.spellings import Spellings

if TYPE_CHECKING:
    from mpdoctor.facts.schema import ExceptionRecord, Facts

CODE_PATTERN = re.compile(r"^MP\d{3}$")
PASS_LETTERS = ("S", "T", "A")
# Most rules need float16/bfloat16 compute, which no file can have without spelling one of these.
FLOAT16_TEXT = r"float16|half"

# The hooks of each kind take different arguments (see the module docstring); a decorator returns its function as
# it is. The ones whose arguments this module can name without importing upward are checked at registration.
_Fn = TypeVar("_Fn", bound=Callable[..., Any])
_Pattern = TypeVar("_Pattern", bound="Callable[[str], ExceptionVerdict | None]")
_Explainer = TypeVar("_Explainer", bound="Callable[[ExceptionRecord, Facts, list[Diagnostic]], bool]")
_Absorber = TypeVar("_Absorber", bound=Callable[[Diagnostic, Diagnostic], bool])


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
    bad: str  # a complete file that raises the rule (tests/test_rule_examples.py checks it)
    good: str  # the same file fixed: the rule stays quiet
    fix: str
    opt_in: bool = False  # not in the default selection: selected only by its full code (select / extend-select)

    @property
    def pass_names(self) -> tuple[str, ...]:
        return tuple(PASS_NAMES[p] for p in self.passes)


@dataclass(frozen=True)
class StaticCheck:
    codes: tuple[str, ...]
    fn: Callable[..., Any]  # fn(ctx: StaticContext) -> Iterable[Diagnostic]
    requires: tuple[Spellings, ...]  # the check cannot fire on a file whose text misses one (cheap early skip)

    def may_fire(self, text: str, float16_assumed: bool, seen: dict[str, bool]) -> bool:
        """`seen` caches pattern -> found for one file (checks share patterns)."""
        for pattern in self.requires:
            if float16_assumed and pattern.pattern == FLOAT16_TEXT:
                continue
            if pattern.pattern not in seen:
                seen[pattern.pattern] = pattern.found_in(text)
            if not seen[pattern.pattern]:
                return False
        return True


@dataclass(frozen=True)
class Hook:
    """A registered function of some rules (trace check, verdicts, explainer...)."""

    codes: tuple[str, ...]
    fn: Callable[..., Any]  # the signature of its kind (see the module docstring)
    order: int = 0


_RULES: dict[str, Rule] = {}
_STATIC_CHECKS: dict[str, StaticCheck] = {}
_HOOKS: dict[str, dict[str, Hook]] = {
    "trace": {},
    "verdicts": {},
    "patterns": {},
    "explains": {},
    "absorbs": {},
    "suppressions": {},
}
_ENGINE_CODES: dict[str, str] = {}  # role -> code, raised by the engine itself rather than by a registered check
_loaded = False


def define_rule(
    code: str,
    name: str,
    severity: str,
    passes: str,
    fixable: bool,
    *,
    summary: str,
    what: str,
    why: str,
    bad: str,
    good: str,
    fix: str,
    opt_in: bool = False,
) -> Rule:
    if not CODE_PATTERN.match(code):
        raise ValueError(f"bad rule code {code!r}")
    if code in _RULES:
        raise ValueError(f"rule code {code} defined twice")
    if any(r.name == name for r in _RULES.values()):
        raise ValueError(f"rule name {name!r} defined twice")
    if not passes or any(p not in PASS_LETTERS for p in passes):
        raise ValueError(f"{code}: bad passes {passes!r}")
    rule = Rule(
        code,
        name,
        Severity(severity),
        passes,
        fixable,
        summary,
        _dedent(what),
        _dedent(why),
        _dedent(bad),
        _dedent(good),
        _dedent(fix),
        opt_in,
    )
    _RULES[code] = rule
    return rule


def _check_codes(codes: tuple[str, ...], letter: str | None, kind: str) -> None:
    """A hook may only name defined codes; checks only codes whose rule lists their pass."""
    for code in codes:
        if code not in _RULES:
            raise ValueError(f"{kind} for undefined rule {code}")
        if letter is not None and letter not in _RULES[code].passes:
            raise ValueError(f"{code} is not a {kind} rule")


def raised_by_engine(role: str, code: str) -> None:
    """The code the engine raises itself for `role` ("run_failed": the trace failed, or the run's exception is
    explained by no rule): implemented without a check."""
    _check_codes((code,), None, "engine code")
    _ENGINE_CODES[role] = code


def engine_code(role: str) -> str:
    """The code registered for `role` with `raised_by_engine`."""
    load_rules()
    return _ENGINE_CODES[role]


def static_check(*codes: str, requires: str | tuple[str, ...] = FLOAT16_TEXT) -> Callable[[_Fn], _Fn]:
    """Register a static check that may raise the given codes.

    `requires`: regexes that the text of any file the check can fire on matches, every one of them. A necessary
    condition (the spelling of an API the rule is about), never a heuristic. `FLOAT16_TEXT` is waived when the
    configuration assumes a float16 policy.
    """

    def register(fn: _Fn) -> _Fn:
        _check_codes(codes, "S", "static")
        patterns = tuple(Spellings(r) for r in ((requires,) if isinstance(requires, str) else requires))
        _STATIC_CHECKS[_key(fn)] = StaticCheck(codes, fn, patterns)
        return fn

    return register


def _hook(kind: str, codes: tuple[str, ...], letter: str | None = None, order: int = 0) -> Callable[[_Fn], _Fn]:
    def register(fn: _Fn) -> _Fn:
        _check_codes(codes, letter, kind)
        _HOOKS[kind][_key(fn)] = Hook(codes, fn, order)
        return fn

    return register


def trace_check(*codes: str) -> Callable[[_Fn], _Fn]:
    """Register a trace check: pure, facts in, diagnostics out."""
    return _hook("trace", codes, "T")


def static_verdicts(*codes: str) -> Callable[[_Fn], _Fn]:
    """Register what the trace says about the static findings of these codes (see the module docstring)."""
    return _hook("verdicts", codes, "S")


def exception_pattern(code: str, *, order: int) -> Callable[[_Pattern], _Pattern]:
    """Register the rule's reading of exception messages; lower `order` is tried first."""
    return _hook("patterns", (code,), order=order)


def explains_exception(code: str) -> Callable[[_Explainer], _Explainer]:
    return _hook("explains", (code,))


def absorbs_crash(code: str) -> Callable[[_Absorber], _Absorber]:
    return _hook("absorbs", (code,))


def unused_suppressions_check(code: str) -> Callable[[_Fn], _Fn]:
    """Register the check of the suppression comments that suppressed nothing (run by the engine, after suppressing)."""
    return _hook("suppressions", (code,))


def _key(fn: Callable[..., object]) -> str:
    return fn.__module__ + "." + fn.__qualname__


def hooks(kind: str) -> list[Hook]:
    load_rules()
    found = _HOOKS[kind].values()
    return sorted(found, key=lambda h: (h.order, h.codes, _key(h.fn)))


def static_checks() -> list[StaticCheck]:
    load_rules()
    return [_STATIC_CHECKS[k] for k in sorted(_STATIC_CHECKS)]


def implemented_codes() -> set[str]:
    """Codes some pass of this version can raise (the others are defined in the contract, not yet checked)."""
    load_rules()
    codes = set(_ENGINE_CODES.values())
    for check in _STATIC_CHECKS.values():
        codes.update(check.codes)
    for hook in (*_HOOKS["trace"].values(), *_HOOKS["suppressions"].values()):
        codes.update(hook.codes)
    return codes


@dataclass(frozen=True, kw_only=True)
class ExceptionVerdict:
    """A rule's reading of an exception message of the run: each rule's pattern returns its own subclass, with the
    details it read; `classify_exception` fills in the rule's code and the layer the message names."""

    code: str = ""
    layer: str | None = None
    layer_class: str | None = None


def classify_exception(message: str | None) -> ExceptionVerdict | None:
    """The rule explaining an exception of the run, or None: the first registered pattern that reads the message."""
    from mpdoctor.tf_messages import layer_context, strip_ansi

    message = strip_ansi(message or "")
    for hook in hooks("patterns"):
        found = hook.fn(message)
        if found is not None:
            verdict: ExceptionVerdict = replace(found, code=hook.codes[0], **layer_context(message))
            return verdict
    return None


class _HasMessage(Protocol):
    @property
    def message(self) -> str | None: ...


def verdict_of(error: _HasMessage | None) -> ExceptionVerdict | None:
    """`classify_exception` of a recorded exception or error (anything with a `message`; None gives None)."""
    return classify_exception(error.message) if error is not None else None


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


def rule_name(code: str) -> str | None:
    """The rule's name, or None for a code the registry does not know (never raises)."""
    load_rules()
    rule = _RULES.get(code)
    return rule.name if rule else None


def expand_selector(selector: str, opt_in: bool = False) -> set[str]:
    """`MP4` -> every MP4xx code; `MP401` -> itself; `ALL` -> everything. Unknown -> ValueError.

    Opt-in rules (ruff's "preview" style) are in a prefix or `ALL` only with `opt_in=True` (what `ignore` wants:
    ignoring `MP6` ignores MP603 too); a full code always selects its rule."""
    load_rules()
    sel = selector.strip().upper()
    if not (sel == "ALL" or re.fullmatch(r"MP\d{0,3}", sel)):
        raise ValueError(f"unknown rule selector {selector!r} (expected a code such as MP401 or a prefix such as MP4)")
    matched = {c for c in _RULES if sel == "ALL" or c.startswith(sel)}
    if not matched:
        raise ValueError(f"unknown rule selector {selector!r}: no rule code starts with it")
    if sel in _RULES or opt_in:
        return matched
    return {c for c in matched if not _RULES[c].opt_in}


def default_selection() -> set[str]:
    """The codes checked when nothing is selected: every rule except the opt-in ones."""
    return expand_selector("ALL")


def _dedent(text: str) -> str:
    return textwrap.dedent(text).strip("\n")
