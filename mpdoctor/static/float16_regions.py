"""The user code that runs in float16, for the dtype flow (mpdoctor.static.dataflow) to look into.

It is the `call` of a local Layer/Model subclass (and the `self.helper(...)` methods it calls) whose instances compute
in float16/bfloat16, the function or lambda given to a `keras.layers.Lambda` layer whose policy computes in
float16/bfloat16, and the module-level functions of the file either calls by name. Each region says the policies it
computes under and how its parameters arrive (autocast to the compute dtype or not)."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

from mpdoctor.facts.dtypes import compute_dtype, is_float16_compute
from mpdoctor.facts.keras_semantics import autocasts_argument
from mpdoctor.facts.op_dtypes import CONST, F16, TENSOR
from mpdoctor.static.context import StaticContext
from mpdoctor.static.tree_index import FUNCTION_NODES


@dataclass
class Region:
    """One function body of user code that runs in float16."""

    function: ast.AST  # FunctionDef or Lambda
    cls: ast.ClassDef | None
    owner: str  # "layer `Foo`" or "the Lambda layer on line 12"
    role: str  # "call", "helper" or "lambda"
    policies: frozenset
    params: dict[str, str] = field(default_factory=dict)

    @property
    def float16_policy(self) -> str | None:
        return min((p for p in self.policies if compute_dtype(p) == "float16"), default=None)

    @property
    def low_policy(self) -> str:
        return min(p for p in self.policies if is_float16_compute(p))

    @property
    def pure(self) -> bool:
        """Some low-precision policy also makes the VARIABLES low precision (`float16`, `bfloat16`)."""
        return any(p in ("float16", "bfloat16") for p in self.policies)

    @property
    def mixed_only(self) -> bool:
        low = [p for p in self.policies if is_float16_compute(p)]
        return bool(low) and all(p.startswith("mixed_") for p in low)

    @property
    def where(self) -> str:
        name = getattr(self.function, "name", None)
        if self.role == "lambda":
            return self.owner
        return f"`{name}` of {self.owner}"

    def first_param(self) -> str | None:
        args = self.function.args  # type: ignore[attr-defined]
        names = [a.arg for a in [*args.posonlyargs, *args.args]]
        if self.cls is not None and names:
            names = names[1:]
        return names[0] if names else None


_CALLS = frozenset({ast.Call})


def float16_regions(ctx: StaticContext) -> list[Region]:
    """Function bodies of user code computing under a float16/bfloat16 policy, each listed once."""
    memo = ctx.memo("float16_regions")
    if "regions" in memo:
        return memo["regions"]
    regions: dict[ast.AST, Region] = {}
    keras_major = ctx.keras_version.major
    for name, cls in ctx.custom_layer_classes.items():
        policies = ctx.class_policies(name)
        if any(is_float16_compute(p) for p in policies):
            _add_class_methods(ctx, name, cls, policies, regions, keras_major)
    for lc in ctx.layer_calls:
        if lc.qualname == "keras.layers.Lambda":
            policies = ctx.layer_policies(lc)
            if any(is_float16_compute(p) for p in policies):
                _add_lambda_function(ctx, lc.node, policies, regions, keras_major)
    result = list(regions.values())
    memo["regions"] = result
    return result


def _add_class_methods(
    ctx: StaticContext, name: str, cls: ast.ClassDef, policies: frozenset, regions: dict, keras_major: int
) -> None:
    """The `call` of a float16 layer or model class, the `self.<method>(...)` it calls, and their plain helpers."""
    methods = {s.name: s for s in cls.body if isinstance(s, FUNCTION_NODES)}
    if "call" not in methods:
        return
    kind = "model" if ctx.is_custom_model(cls) else "layer"
    owner = f"{kind} `{name}`"
    todo = [(methods["call"], "call")]
    while todo:
        fn, role = todo.pop()
        if fn in regions:
            continue
        region = Region(fn, cls, owner, role, policies)
        region.params = _param_kinds(fn, skip_self=True, role=role, keras_major=keras_major)
        regions[fn] = region
        todo += [(methods[called], "helper") for called in _own_methods_called(ctx, fn, methods)]
        _add_plain_helpers(ctx, fn, owner, policies, regions, keras_major)


def _own_methods_called(ctx: StaticContext, fn: ast.AST, methods: Mapping[str, ast.AST]) -> list[str]:
    """The methods of the class `fn` calls as `self.<method>(...)` (not call, build or __init__), in walk order."""
    return [
        node.func.attr
        for node in ctx.scope_nodes_of(fn, _CALLS)
        if isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
        and node.func.attr in methods
        and node.func.attr not in ("call", "build", "__init__")
    ]


def _add_lambda_function(
    ctx: StaticContext, call: ast.Call, policies: frozenset, regions: dict, keras_major: int
) -> None:
    """The function (or lambda) a float16 `Lambda` layer wraps, and its plain helpers."""
    fn_expr = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "function"), None)
    fn = _function_of(ctx, fn_expr)
    if fn is None:
        return
    if fn in regions:
        regions[fn].policies = regions[fn].policies | policies
        return
    owner = f"the function of the Lambda layer on line {call.lineno}"
    region = Region(fn, None, owner, "lambda", policies)
    region.params = _param_kinds(fn, skip_self=False, role="lambda", keras_major=keras_major)
    regions[fn] = region
    _add_plain_helpers(ctx, fn, owner, policies, regions, keras_major)


def _add_plain_helpers(
    ctx: StaticContext, caller: ast.AST, owner: str, policies: frozenset, regions: dict, keras_major: int
) -> None:
    """Module-level functions of this file that float16 code calls by name (`masked_fill(scores, mask)` in a
    layer's `call`, a Lambda's function), and the ones they call: they run in float16 too. Their parameters
    arrive with an unknown dtype (findings there get medium confidence)."""
    todo = [caller]
    while todo:
        fn = todo.pop()
        for node in ctx.scope_nodes_of(fn, _CALLS):
            if not isinstance(node.func, ast.Name):
                continue
            helper = _module_function(ctx, node.func.id)
            if helper is None or helper is caller:
                continue
            if helper in regions:
                regions[helper].policies = regions[helper].policies | policies
                continue
            region = Region(helper, None, owner, "helper", policies)
            region.params = _param_kinds(helper, skip_self=False, role="helper", keras_major=keras_major)
            regions[helper] = region
            todo.append(helper)


def _module_function(ctx: StaticContext, name: str) -> ast.FunctionDef | None:
    """The function `name` defined once at module level of this file, else None."""
    found = [s for s in ctx.tree.body if isinstance(s, FUNCTION_NODES) and s.name == name]
    return found[0] if len(found) == 1 else None  # type: ignore[return-value]


def _function_of(ctx: StaticContext, expr: ast.AST | None) -> ast.AST | None:
    if isinstance(expr, ast.Lambda):
        return expr
    if isinstance(expr, ast.Name):
        defs = [n for n in ctx.nodes_of(*FUNCTION_NODES) if n.name == expr.id]
        if len(defs) == 1:
            return defs[0]
    return None


def _param_kinds(fn: ast.AST, *, skip_self: bool, role: str, keras_major: int) -> dict[str, str]:
    """How each parameter arrives: the `call` arguments the layer autocasts (mpdoctor.facts.keras_semantics) and
    a Lambda's input are in the compute dtype."""
    args = fn.args  # type: ignore[attr-defined]
    positional = [*args.posonlyargs, *args.args]
    if skip_self and positional:
        positional = positional[1:]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    kinds: dict[str, str] = {}
    for index, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
        if (
            isinstance(default, ast.Constant) and isinstance(default.value, (bool, int, float, str))
        ) or arg.arg == "training":
            kinds[arg.arg] = CONST
        elif role == "call" and autocasts_argument(keras_major, index):
            kinds[arg.arg] = F16
        elif role == "lambda":
            kinds[arg.arg] = F16 if index == 0 else CONST  # the Lambda's input; then `arguments={...}` values
        else:
            kinds[arg.arg] = TENSOR
    for arg in args.kwonlyargs:
        kinds[arg.arg] = CONST if arg.arg == "training" else TENSOR
    return kinds
