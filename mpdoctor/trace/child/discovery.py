"""Which models of the imported file the trace analyses: `--entry`; else zero-argument builders; else module-level
models; else every top-level model created during import."""

from __future__ import annotations

import functools
import inspect
import re
import sys

from mpdoctor.facts.keras_semantics import sublayers
from mpdoctor.facts.schema import Facts
from mpdoctor.trace.child import stop
from mpdoctor.trace.child.keras_adapter import model_classes

BUILDER_NAMES = ("build_model", "create_model", "get_model", "make_model")
_BUILDER_LIKE = re.compile(
    r"^_?(?:(?:build|create|make|get|define|construct)(?:_\w+)?|\w*model\w*|\w+_(?:net|network|"
    r"classifier|encoder|decoder|backbone|cnn|mlp))$",
    re.IGNORECASE,
)
_NOT_A_BUILDER = re.compile(
    r"data|loader|optimi[sz]er|loss|metric|callback|train|fit|eval|predict|input|generator|"
    r"pipeline|config|arg|pars|path|save|load|export|test|plot|summary|step|batch",
    re.IGNORECASE,
)


class EntryNotFound(LookupError):
    """--entry names what the file does not define (the user's mistake, not mpdoctor's failure)."""


def discover(module, entry: str | None, recorder, facts: Facts, describe) -> list[tuple[str, str, object]]:
    """(name, how found, model). `describe(exc, phase)` makes the facts' record of a builder that raised."""
    search = _Search(module, facts, describe)
    if entry:
        search.call(entry, fresh_names=True)
        return search.found
    if facts.exception is None:
        search.call_builders()
        if search.found:
            return _drop_helper_builds(search.found, search.built, search.nested_calls)
        search.read_module_attributes()
        if search.found:
            return _drop_contained(search.found)
    search.take_created_models(recorder)
    return search.found


def created_models(module, recorder, facts: Facts, describe) -> list[tuple[str, str, object]]:
    """Every top-level model the run created (the file ran as `__main__`: its models are a function's locals)."""
    search = _Search(module, facts, describe)
    search.take_created_models(recorder)
    return search.found


class _Search:
    """The models found so far, in the order found (each once), and what each builder called returned."""

    def __init__(self, module, facts: Facts, describe) -> None:
        self.module = module
        self.facts = facts
        self.describe = describe
        self.classes = model_classes()
        self.found: list[tuple[str, str, object]] = []
        self.built: dict = {}  # builder name -> what it returned
        self.nested_calls: dict[str, list] = {}  # outer builder name -> (builder, value) of the builders it called

    def add(self, value, name: str, how: str) -> None:
        """A model, or the models in a list, tuple or dict (named after their place in it)."""
        if isinstance(value, self.classes):
            if all(value is not m for _, _, m in self.found):
                self.found.append((name, how, value))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                self.add(item, f"{name}[{i}]", how)
        elif isinstance(value, dict):
            for key, item in value.items():
                self.add(item, f"{name}[{key!r}]", how)

    def call(self, name: str, fresh_names: bool = False) -> None:
        """Call the builder `name` (or take the module attribute, when it is not callable) and add what it returns;
        a builder that raises is the run's exception (the first one)."""
        target = getattr(self.module, name, None)
        if target is None:
            raise EntryNotFound(f"--entry {name}: the file defines no such name")
        if not callable(target) or isinstance(target, self.classes):
            self.add(target, name, f"module attribute `{name}`")
            return
        if stop.requested() is not None:  # out of time: no more of the user's code runs
            return
        try:
            value = _build(target, fresh_names)
        except BaseException as exc:
            if stop.is_timeout(exc):  # the builders that finished are analysed; this one never returned
                return
            if self.facts.exception is None:
                self.facts.exception = self.describe(exc, "build")
                self.facts.status = "exception"
            return
        self.add(value, value.name if hasattr(value, "name") else name, f"{name}()")
        self.built[name] = value

    def call_builders(self) -> None:
        names = _builder_names(self.module)
        if names:
            _parse_absl_flags()
        with _NestedBuilderCalls(self.module, names) as nested_calls:
            for name in names:
                self.call(name, fresh_names=True)
        self.nested_calls = nested_calls.returned

    def read_module_attributes(self) -> None:
        for name, value in list(vars(self.module).items()):
            if not name.startswith("__"):
                self.add(value, name, f"module attribute `{name}`")

    def take_created_models(self, recorder) -> None:
        """Every top-level model created during the run (none nested in another)."""
        nested = _nested_model_ids(recorder.models)
        for model in recorder.models:
            if id(model) not in nested:
                record = recorder.layers.get(str(id(model)))
                where = record.created_at if record is not None else None
                self.add(model, getattr(model, "name", "model"), f"created at line {where.line if where else '?'}")


def _parse_absl_flags() -> None:
    """A script using absl flags builds its model after `app.run` parsed them (`python train.py`: the defaults); the
    trace calls its builders without `app.run`, where reading a flag raises UnparsedFlagAccessError, so it parses
    them as that run would. Flags that are required, or unparseable, are left as they are: the run would stop there."""
    flags = sys.modules.get("absl.flags")
    if flags is None or flags.FLAGS.is_parsed():
        return
    try:
        flags.FLAGS(sys.argv[:1])
    except Exception:  # a usage error of the user's run: left unparsed, as the run stops before building
        flags.FLAGS.unparse_flags()


def _build(builder, fresh_names: bool):
    """Call a builder. `fresh_names`: with Keras' automatic layer names restarted first, so the model built again
    here names its layers as a run that builds it first does (`dense`, not `dense_1`: issue 14 item 8; a file that
    builds several models in one run names the later ones on from the earlier ones, which no order here can know
    for every file: each gets the names of a first build). Where that makes two
    names clash (the builder also uses a layer the file made at import, named `dense` too), build it again with
    the names counting on: the trace must not fail where the user's run works."""
    if not fresh_names:
        return builder()
    from mpdoctor.trace.child.keras_adapter import reset_layer_names

    reset_layer_names()
    try:
        return builder()
    except ValueError:  # both Keras lines raise ValueError on duplicate layer names
        return builder()


class _NestedBuilderCalls:
    """While the builders run, which ones another builder called and what they returned (`returned`: outer
    builder name -> values of the builders it called), so a helper's model that the outer model contains is
    recognised although the helper's own call built another instance of it. The module's globals are swapped for
    counting wrappers (a function looks its callees up there at call time) and put back on exit."""

    def __init__(self, module, names: list[str]) -> None:
        self.module = module
        self.names = names
        self.originals: dict = {}
        self.returned: dict[str, list] = {}
        self._outer: list[str] = []

    def __enter__(self):
        namespace = vars(self.module)
        for name in self.names:
            self.originals[name] = namespace[name]
            namespace[name] = self._wrap(name, namespace[name])
        return self

    def __exit__(self, *exc_info) -> None:
        namespace = vars(self.module)
        for name, original in self.originals.items():
            if namespace.get(name) is not original:
                namespace[name] = original

    def _wrap(self, name: str, original):
        @functools.wraps(original)
        def counted(*args, **kwargs):
            self._outer.append(name)
            try:
                value = original(*args, **kwargs)
            finally:
                self._outer.pop()
            if self._outer:  # called by another builder: the value belongs to the outermost one
                self.returned.setdefault(self._outer[0], []).append((name, value))
            return value

        return counted


def _drop_helper_builds(found: list, built: dict, returned: dict) -> list:
    """Drop the model of a builder whose result another builder's model contains (`build_encoder()` composed by
    `build_classifier()`): it is analysed where it is used, as an inner part, never as a model of its own (issue
    14 item 6). Then the models contained in another found model, as for module attributes."""
    helpers = set()
    for outer, calls in returned.items():
        outer_model = built.get(outer)
        if outer_model is None:
            continue
        inner_layers = {id(layer) for layer in sublayers(outer_model, recursive=True)}
        for helper, value in calls:
            if helper != outer and id(value) in inner_layers:
                helpers.add(helper)
    helper_values = {id(built[name]) for name in helpers if name in built}
    return _drop_contained([entry for entry in found if id(entry[2]) not in helper_values])


def _builder_names(module) -> list[str]:
    """The conventional builder names if the file defines one; else its own zero-argument functions whose name says
    they build a model (`build`, `create_classifier`, `get_unet`, `transformer_model`), never ones that say they
    load data, train or evaluate."""
    conventional = [
        name
        for name in BUILDER_NAMES
        if callable(getattr(module, name, None)) and _zero_argument(getattr(module, name))
    ]
    if conventional:
        return conventional
    return [
        name
        for name, target in vars(module).items()
        if _BUILDER_LIKE.match(name)
        and not _NOT_A_BUILDER.search(name)
        and inspect.isfunction(target)
        and target.__module__ == module.__name__
        and _zero_argument(target)
    ]


def _drop_contained(found: list) -> list:
    """A model whose layers all belong to another found model (a backbone whose output feeds a new head) is
    analysed as part of that model, not on its own: its float16 output is an inner tensor there."""
    layer_sets = [{id(layer) for layer in sublayers(model, recursive=True)} for _, _, model in found]
    kept = []
    for i, entry in enumerate(found):
        inner = layer_sets[i]
        if inner and any(j != i and inner < other for j, other in enumerate(layer_sets)):
            continue
        kept.append(entry)
    return kept


def _zero_argument(fn) -> bool:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in signature.parameters.values()
    )


def _nested_model_ids(models) -> set[int]:
    nested: set[int] = set()
    for model in models:
        for layer in sublayers(model, recursive=True):
            if layer is not model:
                nested.add(id(layer))
        inner = getattr(model, "_functional", None)  # the Functional a Keras 3 Sequential builds to run itself
        if inner is not None and inner is not model:
            nested.add(id(inner))
    return nested
