"""Running the file as its user runs it (issue 31), when importing it is not enough.

- `__main__`: a script that builds its model only under `if __name__ == "__main__":` (in a function needing its
  parsed arguments, or inline) builds nothing on import and offers no zero-argument builder. The trace then runs
  those blocks in the imported module, as `python file.py` does after the module's body (argv = [file]: argparse's
  and absl's defaults, as a user running it bare), and stops at the first training call once a model exists
  (`fit`, `fit_generator`, `train_on_batch`, an optimizer applying gradients in a custom loop): nothing trains, and
  what fails after the model exists (a dataset that cannot be read here) does not lose the model.
- The working directory: a script that reads its data by a path relative to its own directory (`pd.read_csv(
  "milk.csv")` next to it, its README saying `cd tasks`) runs from there when that path is missing from the
  directory mpdoctor runs in.
- Arguments: a script that cannot run without command-line arguments (argparse's `required=True`, absl's required
  flags, `Path(None)` from a `--config` not given) is recognised, so that the parent reports "needs command-line
  arguments", not an error.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import os
import re
import sys
import types
from collections.abc import Callable, Iterator

from mpdoctor.facts.schema import EntryRun, Facts
from mpdoctor.trace.child import stop
from mpdoctor.trace.child.keras_adapter import KERAS_PACKAGES, model_classes

MODEL_PACKAGES = frozenset({"tensorflow", "keras", "tf_keras", "tensorflow_hub", "keras_hub", "keras_cv", "keras_nlp"})
TRAINING_METHODS = ("fit", "fit_generator", "train_on_batch")
GRADIENT_METHODS = ("apply_gradients", "apply")
_LONGEST_PATH = 260
_REQUIRED = re.compile(r"(?:arguments? (?:are|is) required: (.+)|one of the arguments (.+) is required)")


class ReachedTraining(BaseException):
    """The `__main__` run reached its first training call with a model built: where the trace stops it. A
    BaseException, so that the user's `except Exception:` does not swallow it."""


def entry_run(facts: Facts) -> EntryRun:
    """The facts' record of how the file ran, created on first use."""
    if not isinstance(facts.entry_run, EntryRun):
        facts.entry_run = EntryRun()
    return facts.entry_run


# ---------------------------------------------------------------------------------------- the working directory


def data_directory(tree: ast.Module, file: str) -> str | None:
    """The script's own directory when a relative path its source names (a string literal: `"data/milk.csv"`) is
    missing from the working directory but exists next to the script: that is where its user runs it from."""
    here = os.path.dirname(os.path.abspath(file))
    if os.path.realpath(here) == os.path.realpath(os.getcwd()):
        return None
    literals = (n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))
    for text in literals:
        if _relative_path(text) and not os.path.exists(text) and os.path.exists(os.path.join(here, text)):
            return here
    return None


def _relative_path(text: str) -> bool:
    """A literal that can name a file by a relative path (`milk.csv`, `data/train`), not `.`, a URL or a sentence."""
    if not 0 < len(text) < _LONGEST_PATH or text.strip(".") == "" or "://" in text:
        return False
    if any(c in text for c in "\n\r\t\0*?{}%") or text.startswith(("/", "~", "-")):
        return False
    return "/" in text or bool(re.search(r"\.\w{1,5}$", text))


# -------------------------------------------------------------------------------------- command-line arguments


class _ArgumentWatch:
    """What argparse said of the run's command line: the usage errors it raised (a required argument missing) and
    the options it left None because they were not given and have no default."""

    def __init__(self) -> None:
        self.required: list[str] = []
        self.unset: dict[str, str] = {}  # dest -> the option's name (`config` -> `--config`)

    def install(self) -> None:
        parser = argparse.ArgumentParser
        if getattr(parser.error, "__mpdoctor_watch__", False):
            return
        original_error, original_parse = parser.error, parser.parse_known_args
        watch = self

        @functools.wraps(original_error)
        def error(self, message: str):
            watch.required.extend(_required_names(str(message)))
            return original_error(self, message)

        @functools.wraps(original_parse)
        def parse_known_args(self, *args, **kwargs):
            parsed = original_parse(self, *args, **kwargs)
            namespace = parsed[0] if isinstance(parsed, tuple) and parsed else None
            for action in getattr(self, "_actions", ()):
                given = getattr(namespace, action.dest, None) is not None
                if action.option_strings and action.default is None and action.nargs != 0 and not given:
                    watch.unset[action.dest] = max(action.option_strings, key=len)
            return parsed

        error.__mpdoctor_watch__ = True  # type: ignore[attr-defined]
        parser.error = error  # type: ignore[method-assign]
        parser.parse_known_args = parse_known_args  # type: ignore[method-assign]
        self._install_absl()

    def _install_absl(self) -> None:
        """absl's `mark_flag_as_required`: `app.run` parsing the command line fails with "Flag --x must have a value
        other than None" and exits 1. Only when TensorFlow has loaded absl.flags (it does): nothing imported here."""
        flags = sys.modules.get("absl.flags")
        values = getattr(flags, "FlagValues", None)
        illegal = getattr(flags, "IllegalFlagValueError", None)
        if not isinstance(values, type) or not isinstance(illegal, type):
            return
        original = values.__call__
        watch = self

        @functools.wraps(original)
        def parse(self, *args, **kwargs):
            try:
                return original(self, *args, **kwargs)
            except illegal as exc:
                watch.required.extend(re.findall(r"Flag (--[\w-]+) must have a value other than None", str(exc)))
                raise

        values.__call__ = parse  # type: ignore[method-assign]

    def needed_by(self, exc: BaseException, traceback_text: str) -> list[str]:
        """The command-line arguments whose absence made the run raise `exc`: those argparse required (its usage
        error ends the run with SystemExit), or the options left None that the failing code used (`Path(args.
        config)` raising TypeError on None)."""
        if isinstance(exc, SystemExit):
            return list(dict.fromkeys(self.required))
        if "NoneType" not in str(exc) and "None" not in str(exc):
            return []
        used = [name for dest, name in self.unset.items() if re.search(rf"\.{re.escape(dest)}\b", traceback_text)]
        return used


def _required_names(message: str) -> list[str]:
    match = _REQUIRED.search(message)
    if match is None:
        return []
    names = match.group(1) or match.group(2) or ""
    return [name for name in re.split(r"[,\s]+", names.strip()) if name]


_watch = _ArgumentWatch()


def watch_arguments() -> None:
    """From now on, note what argparse says of the run's command line (before the file runs)."""
    _watch.install()


def note_missing_arguments(exc: BaseException, traceback_text: str, facts: Facts) -> None:
    """When `exc` ended the run for lack of command-line arguments, the facts name them."""
    needed = _watch.needed_by(exc, traceback_text)
    if needed:
        entry_run(facts).needs_arguments = needed


# ------------------------------------------------------------------------------------------------- __main__


def main_blocks(tree: ast.Module) -> list[ast.stmt]:
    """The file's top-level `if __name__ == "__main__":` statements (whatever else their test also asks)."""
    return [node for node in tree.body if isinstance(node, ast.If) and _tests_main(node.test)]


def reaches_model_code(module, root: str | None) -> bool:
    """Whether the file uses TensorFlow, Keras or its project's own modules (`from tensorflow import keras`,
    `from ..models import backbone`): a script that uses neither (a download or conversion tool) builds no model
    under `__main__` either, and is not run."""
    own = os.path.realpath(getattr(module, "__file__", "") or "")
    project = os.path.realpath(root or os.path.dirname(own)) + os.sep
    for value in list(vars(module).values()):
        source = _module_of(value)
        if source is None or source is module:
            continue
        if source.__name__.partition(".")[0] in MODEL_PACKAGES:
            return True
        file = os.path.realpath(getattr(source, "__file__", None) or "")
        if file.startswith(project) and file != own and "site-packages" not in file:
            return True
    return False


def _module_of(value) -> types.ModuleType | None:
    """The module `value` is, or the one that defined it (a class, a function)."""
    if isinstance(value, types.ModuleType):
        return value
    try:
        name = getattr(value, "__module__", None)
    except Exception:  # a proxy of the user's that raises on any attribute
        return None
    return sys.modules.get(name) if isinstance(name, str) else None


def _tests_main(test: ast.expr) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and len(node.comparators) == 1:
            sides = (node.left, node.comparators[0])
            names = any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            main = any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)
            if names and main:
                return True
    return False


def run_as_main(module, blocks: list[ast.stmt], file: str, recorder, facts: Facts, describe) -> None:
    """Run `blocks` in the imported module with `__name__ == "__main__"`, as `python file.py` would after the
    module's body, until the first training call once a model exists. A run ending with SystemExit(0) ends well;
    any other exception is the run's (phase `main`), the models built before it kept."""
    record = entry_run(facts)
    record.as_main = True
    code = compile(ast.Module(body=blocks, type_ignores=[]), file, "exec")
    namespace = vars(module)
    name = namespace.get("__name__")
    namespace["__name__"] = "__main__"
    try:
        with _stopping_at_training(recorder, record):
            exec(code, namespace)  # the user's own file, run as its user runs it
    except ReachedTraining:
        pass
    except SystemExit as exc:
        if exc.code not in (None, 0):
            _main_failed(exc, facts, describe)
    except BaseException as exc:
        if stop.is_timeout(exc):
            raise
        _main_failed(exc, facts, describe)
    finally:
        namespace["__name__"] = name


def _main_failed(exc: BaseException, facts: Facts, describe) -> None:
    facts.exception = describe(exc, "main")
    facts.status = "exception"
    note_missing_arguments(exc, facts.exception.traceback or "", facts)


@contextlib.contextmanager
def _stopping_at_training(recorder, record: EntryRun) -> Iterator[None]:
    """While the `__main__` blocks run, the first training call stops them once a model exists: fit and its kin on
    every Keras model class, an optimizer applying gradients (a custom loop). Put back on exit: the analysis that
    follows runs training steps of its own."""
    restores: list[Callable[[], None]] = []

    def stop_here(original, needs_model: bool):
        @functools.wraps(original)
        def training(*args, **kwargs):
            if not needs_model or recorder.models:
                where = stop.user_line(sys._getframe(1), recorder.user_file)
                record.stopped_at_training = where.line if where is not None else None
                raise ReachedTraining(original.__name__)
            return original(*args, **kwargs)

        return training

    for owner, names, needs_model in _training_methods():
        for method in names:
            original = owner.__dict__.get(method) or getattr(owner, method, None)
            if original is None or not callable(original):
                continue
            had_own = method in owner.__dict__
            setattr(owner, method, stop_here(original, needs_model))
            restores.append(_restorer(owner, method, original if had_own else None))
    try:
        yield
    finally:
        for restore in reversed(restores):
            restore()


def _restorer(owner: type, method: str, original) -> Callable[[], None]:
    def restore() -> None:
        if original is None:
            with contextlib.suppress(AttributeError, TypeError):
                delattr(owner, method)
        else:
            setattr(owner, method, original)

    return restore


def _training_methods() -> list[tuple[type, tuple[str, ...], bool]]:
    """(class, methods, whether a model must exist first): the Keras model classes' training calls (a model exists:
    it is the receiver) and the optimizer classes' gradient application of every Keras line loaded."""
    found: list[tuple[type, tuple[str, ...], bool]] = [(cls, TRAINING_METHODS, False) for cls in model_classes()]
    for package_name in KERAS_PACKAGES:
        package = sys.modules.get(package_name)
        optimizers = getattr(package, "optimizers", None)
        candidates = [
            getattr(optimizers, "Optimizer", None),
            getattr(getattr(optimizers, "legacy", None), "Optimizer", None),
            getattr(getattr(package, "mixed_precision", None), "LossScaleOptimizer", None),
        ]
        seen: set[int] = set()
        for cls in candidates:
            if isinstance(cls, type) and id(cls) not in seen:
                seen.add(id(cls))
                found.append((cls, GRADIENT_METHODS, True))
    return found
