"""--stub-missing (issue 31): stand-in modules for the third-party modules the user's code imports that are not
installed where the trace runs (pandas, wandb, tqdm, albumentations, matplotlib...), so that module-level code that
merely uses them (logging, plotting, progress bars, data frames, config loaders) lets the model still be built.

The finder sits last on sys.meta_path: it is asked only about modules no other finder found, i.e. not installed.
It never stands in for the project's own modules, the standard library or the ML frameworks a model is made of
(TensorFlow, Keras, NumPy, JAX, PyTorch and their families: a fake of those would build a fake model), nor for an
import outside the user's code (a library probing an optional dependency keeps its ImportError) or inside a
`try` that handles the ImportError (the code has a fallback for the module's absence: that path is taken, as in
an environment without it). The names stood in for are recorded (Facts.stand_ins) so that the parent marks every
finding of the run and does not report a failure they may have caused as the user's bug.
"""

from __future__ import annotations

import ast
import functools
import importlib.abc
import importlib.machinery
import inspect
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

MARKER = "mpdoctor stand-in"  # in every stand-in's repr: an exception naming one was caused by it
_ML_MODULES = frozenset(
    {
        "numpy",
        "ml_dtypes",
        "h5py",  # Keras's weight files
        "flax",
        "optax",
        "haiku",
        "sonnet",
        "trax",
        "transformers",
        "official",  # tf-models-official
        "tf2onnx",
        "onnx",
        "tree",  # dm-tree, which Keras uses
        "mpdoctor",
    }
)
_ML_PREFIXES = ("tensorflow", "tf_", "tfx", "keras", "jax", "torch", "tflite")


def never_stood_in(top: str) -> bool:
    """The standard library and the ML frameworks (a stand-in for them would build no real model)."""
    return (
        top in sys.stdlib_module_names
        or top in sys.builtin_module_names
        or top in _ML_MODULES
        or top.startswith(_ML_PREFIXES)
    )


class StandIn:
    """Whatever a missing module's attribute is: attributes, calls, indexing and arithmetic give more stand-ins,
    iteration ends at once, it is falsy and empty, a context manager, a decorator that returns what it decorates,
    and a base class (PEP 560). Private and dunder attributes are missing, so protocols probed with hasattr
    (`__array__`, Keras's `_keras_...`) see a plain object."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_mpdoctor_name", name)

    def __getattr__(self, attribute: str) -> StandIn:
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        return StandIn(f"{self._mpdoctor_name}.{attribute}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and (inspect.isroutine(args[0]) or inspect.isclass(args[0])):
            return args[0]  # `@wandb.watch`, `@hydra.main(...)`: the decorated function or class itself
        return StandIn(f"{self._mpdoctor_name}()")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (stand_in_class(self._mpdoctor_name),)

    def __instancecheck__(self, instance: object) -> bool:  # `isinstance(x, pd.DataFrame)`: nothing is one
        return False

    def __subclasscheck__(self, subclass: type) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<{MARKER} for {self._mpdoctor_name}>"

    __str__ = __repr__

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return False

    def __contains__(self, item: object) -> bool:
        return False

    def __enter__(self) -> StandIn:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def __getitem__(self, key: object) -> StandIn:
        return StandIn(f"{self._mpdoctor_name}[...]")

    def __setitem__(self, key: object, value: object) -> None:
        pass

    def __delitem__(self, key: object) -> None:
        pass

    def _same(self, *other: object) -> StandIn:
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _same
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _same
    __neg__ = __pos__ = __abs__ = __invert__ = _same


@functools.cache
def stand_in_class(name: str) -> type:
    """A base class standing in for `name`: takes any arguments, and its instances' public attributes it lacks are
    stand-ins (`self.log(...)` of a missing Lightning-like base)."""

    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self: object, attribute: str) -> StandIn:
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        return StandIn(f"{name}.{attribute}")

    short = name.rpartition(".")[2].strip("()[].") or "StandIn"
    namespace = {"__init__": __init__, "__getattr__": __getattr__, "__mpdoctor_stand_in__": name}
    return type(short if short.isidentifier() else "StandIn", (), namespace)


class _StandInModule(types.ModuleType):
    def __getattr__(self, attribute: str) -> StandIn:
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        return StandIn(f"{self.__name__}.{attribute}")

    def __repr__(self) -> str:
        return f"<{MARKER} module {self.__name__}>"


class _StandInLoader(importlib.abc.Loader):
    def __init__(self, finder: StandInFinder) -> None:
        self.finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        top = spec.name.partition(".")[0]
        if top not in self.finder.used:
            self.finder.used.append(top)
        module = _StandInModule(spec.name)
        module.__path__ = []  # a package: `import matplotlib.pyplot` finds its submodule here too
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class StandInFinder(importlib.abc.MetaPathFinder):
    """`user_file(path)`: whether code at `path` is the user's (an import elsewhere is a library's); `own(top)`:
    whether a top-level name is the project's own module; `source_of(path)`: the text the code at `path` was
    compiled from (a notebook's cells), None to read the file."""

    def __init__(
        self,
        user_file: Callable[[str], bool],
        own: Callable[[str], bool],
        source_of: Callable[[str], str | None] = lambda path: None,
    ) -> None:
        self.user_file = user_file
        self.own = own
        self.source_of = source_of
        self.used: list[str] = []  # top-level names stood in for, in the order first imported
        self._guarded: dict[str, list[tuple[int, int]]] = {}

    def find_spec(
        self, fullname: str, path: Any = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        top, dot, _ = fullname.partition(".")
        if dot:  # a submodule: only of a stand-in (a missing submodule of a real package is a version question)
            stood_in = isinstance(sys.modules.get(top), _StandInModule)
            return self._spec(fullname) if stood_in else None
        if never_stood_in(top) or self.own(top):
            return None
        importer = _importer()
        if importer is None or not self.user_file(importer.f_code.co_filename):
            return None
        if self._handled(importer.f_code.co_filename, importer.f_lineno):
            return None
        return self._spec(fullname)

    def _spec(self, fullname: str) -> importlib.machinery.ModuleSpec:
        return importlib.machinery.ModuleSpec(fullname, _StandInLoader(self), is_package=True)

    def _handled(self, filename: str, line: int) -> bool:
        """Whether `line` of `filename` is inside a `try` whose handlers catch the ImportError."""
        if filename not in self._guarded:
            self._guarded[filename] = _guarded_ranges(self.source_of(filename) or _read(filename))
        return any(first <= line <= last for first, last in self._guarded[filename])


_CATCHES_IMPORT_ERROR = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def _guarded_ranges(text: str | None) -> list[tuple[int, int]]:
    try:
        tree = ast.parse(text or "")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and node.body and any(_catches(h.type) for h in node.handlers):
            found.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno))
    return found


def _catches(handled: ast.expr | None) -> bool:
    if handled is None:  # a bare `except:`
        return True
    names = handled.elts if isinstance(handled, ast.Tuple) else [handled]
    spelled = {n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", None) for n in names}
    return bool(spelled & _CATCHES_IMPORT_ERROR)


def _read(filename: str) -> str | None:
    try:
        with open(filename, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


_HERE = os.path.abspath(__file__)


def _importer() -> types.FrameType | None:
    """The frame whose import statement (or importlib call) is being served: the first outside the import
    machinery and this module."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        module = frame.f_globals.get("__name__", "")
        machinery = module == "importlib" or module.startswith("importlib.")
        if not (filename.startswith("<frozen importlib") or machinery or filename == _HERE):
            return frame
        frame = frame.f_back
    return None


def install(finder: StandInFinder) -> None:
    """Last on sys.meta_path: asked only about what no other finder found."""
    sys.meta_path.append(finder)
