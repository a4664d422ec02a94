"""What a training step function trains (issue 30), read from the step itself in the trace child: the models and
optimizers it reaches through the module globals its code reads (the common `model = build_model()` at module level),
its closure cells, and the attributes of the object it is bound to (a trainer class's `self.model`,
`self.optimizer`), following the module's own helper functions it calls. The discovery's models are other instances
when the file builds its model in a function: comparing those would measure a model the step never updates.

A step named `object.method` is that method of a module-level object (`trainer.train_step`, `model.train_on_batch`);
`Class.method` is that method bound to the one module-level instance of the class.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mpdoctor.trace.child.keras_adapter import model_classes

MAX_DEPTH = 3  # helper functions followed from the step (step -> compute_loss -> forward)


@dataclass
class StepTarget:
    """The callable step and what it updates; `problem` says why there is none."""

    step: Callable[..., Any] | None = None
    models: list[Any] = field(default_factory=list)
    optimizers: list[Any] = field(default_factory=list)
    arguments: tuple[int, ...] = (2,)  # the positional arguments it takes: (inputs, labels), or (inputs) as a GAN's
    problem: str | None = None


def find_step(module: Any, name: str, discovered: list[Any]) -> StepTarget:
    """The step `name` of `module` and the models and optimizers it reads (the module's, then the discovery's
    models when the step reads none)."""
    step, owner, problem = _resolve(module, name)
    if step is None:
        return StepTarget(problem=problem)
    arguments = argument_counts(step, owner is not None)
    if not arguments:
        return StepTarget(problem=f"`{name}` does not take (inputs, labels) or (inputs) as a training step does")
    values = _reads(step, owner)
    models = _of_kind(values, _is_model)
    optimizers = _of_kind(values, is_optimizer)
    if not models:  # the step reaches its model some other way: the module's models, then the discovery's
        models = _of_kind(list(vars(module).values()), _is_model) or list(discovered)
    if not optimizers:
        optimizers = _of_kind(list(vars(module).values()), is_optimizer)
    models = [m for m in models if getattr(m, "trainable_variables", None)]
    if not models:
        return StepTarget(problem="no model with trainable variables is reachable from the step")
    return StepTarget(step, models, optimizers, arguments)


def _resolve(module: Any, name: str) -> tuple[Callable[..., Any] | None, Any, str | None]:
    """(the step, the object it is a method of or None, why there is no step)."""
    if module is None:
        return None, None, "the module could not be imported"
    owner_name, _, method = name.rpartition(".")
    if not owner_name:
        step = getattr(module, name, None)
        if callable(step):
            return step, None, None
        return None, None, f"`{name}` is not a function of the module once it is imported"
    owner = getattr(module, owner_name, None)
    if owner is None or "." in owner_name:
        return None, None, f"`{owner_name}` is not a name of the module once it is imported"
    # `trainer.train_step` / `model.train_on_batch`: a module-level object's method; `Trainer.train_step`: the
    # method of the one module-level instance of the class.
    instances = [v for v in list(vars(module).values()) if isinstance(v, owner)] if isinstance(owner, type) else [owner]
    if len(instances) != 1:
        how = "no" if not instances else "more than one"
        return None, None, f"{how} module-level instance of `{owner_name}` to call `{method}` on"
    step = getattr(instances[0], method, None)
    if not callable(step):
        return None, None, f"`{owner_name}.{method}` is not a method"
    return step, instances[0], None


def argument_counts(step: Callable[..., Any], bound: bool) -> tuple[int, ...]:
    """How many positional arguments the step can be called with, among (inputs, labels) and (inputs): the labels
    are passed when the step takes a second positional parameter (`train_on_batch(x, y=None)` included)."""
    try:
        parameters = inspect.signature(_python_function(step) or step).parameters.values()
    except (TypeError, ValueError):
        return ()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in parameters if p.kind in kinds][1 if bound else 0 :]
    required = sum(p.default is inspect.Parameter.empty for p in positional)
    return tuple(n for n in (2, 1) if required <= n <= len(positional))


def _python_function(step: Any) -> types.FunctionType | None:
    """The user's function under a tf.function, a bound method or a decorator's wrapper."""
    seen = set()
    while step is not None and id(step) not in seen:
        seen.add(id(step))
        inner = (
            getattr(step, "__wrapped__", None)  # functools.wraps, tf.function's wrapper of a method
            or getattr(step, "python_function", None)  # tf.function
            or getattr(step, "__func__", None)  # bound method
        )
        if inner is None:
            return step if isinstance(step, types.FunctionType) else None
        step = inner
    return None


def _reads(step: Any, owner: Any) -> list[Any]:
    """The values the step's code can reach: globals it names, closure cells, its object's attributes, and the same
    for the module's helper functions it names."""
    values: list[Any] = []
    if owner is not None:  # a model's own method (`model.train_on_batch`) trains that model
        values.extend([owner, *_attributes(owner)])
    visited: set[int] = set()
    pending = [(_python_function(step), 0)]
    while pending:
        function, depth = pending.pop()
        if function is None or id(function) in visited:
            continue
        visited.add(id(function))
        found = [cell.cell_contents for cell in function.__closure__ or () if _filled(cell)]
        names = _names(function.__code__)
        found += [function.__globals__[n] for n in names if n in function.__globals__]
        values.extend(found)
        if depth < MAX_DEPTH:
            same_module = [
                f for f in found if isinstance(f, types.FunctionType) and f.__globals__ is function.__globals__
            ]
            pending.extend((f, depth + 1) for f in same_module)
    return values


def _names(code: types.CodeType) -> list[str]:
    """Every global and attribute name of a code object and the code nested in it (comprehensions, lambdas)."""
    names = list(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names.extend(_names(constant))
    return names


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


def _attributes(owner: Any) -> list[Any]:
    try:
        return list(vars(owner).values())
    except TypeError:
        return []


def _of_kind(values: list[Any], wanted: Callable[[Any], bool]) -> list[Any]:
    """The values (and the items of lists, tuples and dicts among them) that are `wanted`, each once, in order."""
    found: list[Any] = []
    for value in values:
        items = (
            list(value.values()) if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        )
        for item in items:
            if wanted(item) and all(item is not f for f in found):
                found.append(item)
    return found


def _is_model(value: Any) -> bool:
    return isinstance(value, model_classes())


def is_optimizer(value: Any) -> bool:
    """A Keras 3 or tf_keras optimizer (a LossScaleOptimizer included)."""
    names = {c.__name__ for c in type(value).__mro__}
    return "Optimizer" in names or "OptimizerV2" in names
