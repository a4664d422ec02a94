"""The trace is a dry run (issue 14 item 7): a script that trains at module level (`model.fit(..., epochs=200)`
without an `if __name__ == "__main__":` guard) would train for real under the trace, minutes per file, and lose
every finding to the timeout. `fit` and `evaluate` of every Keras model therefore run on at most `DRY_STEPS`
batches (one epoch, validation included) without a progress bar, and return what Keras returns for that: a
History of one epoch, the metrics of those batches. Everything else the file does after them runs as written.

`predict` is left whole: a script may use its result by length (zip with the labels, a confusion matrix), and a
shorter array would raise where the user's run does not."""

from __future__ import annotations

import functools
import inspect

DRY_STEPS = 2
_MARK = "__mpdoctor_dry_run__"


def install(model_class: type) -> None:
    """Wrap `fit` and `evaluate` where `model_class` has them (inherited ones too: Keras 3 defines them on its
    backend's trainer class)."""
    for name, bound_steps in (("fit", _fit_arguments), ("evaluate", _evaluate_arguments)):
        original = getattr(model_class, name, None)
        if original is None or getattr(original, _MARK, False):
            continue
        setattr(model_class, name, _dry(original, bound_steps))


def _dry(original, bound_steps):
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        return original

    @functools.wraps(original)
    def method(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:  # the call is wrong: let Keras say so, as in the user's run
            return original(*args, **kwargs)
        bound_steps(bound.arguments, signature.parameters)
        return original(*bound.args, **bound.kwargs)

    setattr(method, _MARK, True)
    return method


def _fewer(value) -> int:
    return DRY_STEPS if not isinstance(value, int) or value <= 0 else min(value, DRY_STEPS)


def _fit_arguments(arguments: dict, parameters) -> None:
    initial = arguments.get("initial_epoch", 0)
    arguments["epochs"] = (initial if isinstance(initial, int) else 0) + 1
    arguments["steps_per_epoch"] = _fewer(arguments.get("steps_per_epoch"))
    if arguments.get("validation_data") is not None and "validation_steps" in parameters:
        arguments["validation_steps"] = _fewer(arguments.get("validation_steps"))
    if "verbose" in parameters:
        arguments["verbose"] = 0  # no progress bar in the child's output (nor in an MP001 quoting it)


def _evaluate_arguments(arguments: dict, parameters) -> None:
    if "steps" in parameters:
        arguments["steps"] = _fewer(arguments.get("steps"))
    if "verbose" in parameters:
        arguments["verbose"] = 0
