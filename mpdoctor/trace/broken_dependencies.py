"""Whether a failed run stopped inside a third-party dependency that does not import with the packages installed
here (issue 31): imgaug under NumPy 2 (`np.sctypes` is gone), tensorflow-hub 0.8 under TensorFlow 2.21, a native
library (torch) that crashes the process next to TensorFlow. The environment's doing, not the code's, so the trace
reports "not traced" at info (mpdoctor.trace.failures), never the MP001 error.

Decided from the stack alone, conservatively: after the project's last frame, the first frame that is neither
Python's own library nor importlib's machinery is a dependency's module body (`<module>` in site-packages: the
project's import statement executing it), and no frame after it is the project's. An error raised in the project's
code, or by TensorFlow inside a call the project made, never qualifies. A native crash qualifies too when it came
while a compiled extension module was loading (its shared library's code ran: never the project's doing).
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import os
import re
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass

from mpdoctor.project.layout import is_own_module, layout_of


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str | None  # None: a SyntaxError's location, not a running frame


@dataclass(frozen=True)
class BrokenImport:
    dependency: str  # the module whose import the project started: `imgaug`, `timm`
    failed_in: str | None  # the site-packages module of the failing frame when another: `numpy`, `torch`


_TRACEBACK = "Traceback (most recent call last):"
_PYTHON_FRAME = re.compile(r'^  File "([^"]+)", line (\d+)(?:, in (.+))?$', re.MULTILINE)
# faulthandler's dump: `  File "/x/torch/__init__.py", line 237 in <module>`, most recent call first.
_FAULT_FRAME = re.compile(r'^  File "([^"]+)", line (\d+) in (.+)$', re.MULTILINE)
_SITE_DIRS = ("site-packages", "dist-packages")


def traceback_frames(traceback: str) -> list[Frame]:
    """The frames of a formatted traceback's last exception (a chained one's cause is not what stopped the run),
    outermost first."""
    block = traceback.rsplit(_TRACEBACK, 1)[-1] if _TRACEBACK in traceback else ""
    return [Frame(file, int(line), function or None) for file, line, function in _PYTHON_FRAME.findall(block)]


def fault_frames(dump: str) -> list[Frame]:
    """The crashing thread's frames in a faulthandler dump, outermost first."""
    marker = "(most recent call first):"  # "Stack ..." or "Current thread 0x... ..."; the first is the one that died
    current = dump.split(marker, 1)[1].split("\n\n", 1)[0] if marker in dump else ""
    return [Frame(file, int(line), function) for file, line, function in reversed(_FAULT_FRAME.findall(current))]


def project_directory(path: str) -> str:
    """The directory holding the project's code: its root (a notebook's too: its kernel imports the project's
    package), or the file's own directory outside a project."""
    return layout_of(path).root or os.path.dirname(os.path.realpath(path))


def failed_dependency(traceback: str, path: str) -> BrokenImport | None:
    """The dependency the run of the project's file `path` stopped in while importing it (`broken_import`)."""
    return broken_import(traceback_frames(traceback), project_directory(path), _own_of(path))


def crashed_dependency(dump: str, path: str) -> tuple[BrokenImport, int | None] | None:
    """The native library being imported when the run of `path` was killed (`crashed_import`), from faulthandler's
    dump, and the line of `path` that was running (None when another module of the project imported it)."""
    frames = fault_frames(dump)
    crashed = crashed_import(frames, project_directory(path), _own_of(path))
    if crashed is None:
        return None
    real = os.path.realpath(path)
    lines = [frame.line for frame in frames if not frame.file.startswith("<") and os.path.realpath(frame.file) == real]
    return crashed, (lines[-1] if lines else None)


def _own_of(path: str) -> Callable[[str], bool]:
    layout = layout_of(path)
    return lambda name: is_own_module(name, layout, path)


def broken_import(frames: list[Frame], project: str, own: Callable[[str], bool]) -> BrokenImport | None:
    """The dependency whose module body was running when the run stopped, started by an import of the project's
    code (frames under `project`); None when the project's own code, or a call it made, is where it stopped, or
    when the dependency is the project's own module (`own`: a module name -> whether the project holds it)."""
    started = _import_started(frames, project, own)
    if started is None:
        return None
    dependency, _ = started
    failed_in = site_module(frames[-1].file)  # the failing frame
    return BrokenImport(dependency, failed_in if failed_in != dependency else None)


def crashed_import(frames: list[Frame], project: str, own: Callable[[str], bool]) -> BrokenImport | None:
    """The library being imported when a native crash killed the run (faulthandler's frames): the innermost
    dependency's module body (`failed_in`: `torch`) and the package the project's import or call led there through
    (`dependency`: `timm`). Either the project's import statement started it (as `broken_import`), or the crash is
    in loading a compiled extension module (its shared library's own code: never the project's doing), which also
    covers a dump whose outer frames (the project's) faulthandler cut at 100."""
    started = _import_started(frames, project, own)
    if started is None and not _loading_extension(frames):
        return None
    if started is not None:
        dependency: str | None = started[0]
        libraries = started[1]
    else:
        inside = [index for index, frame in enumerate(frames) if _in_project(frame.file, project)]
        libraries = [frame for frame in frames[inside[-1] + 1 if inside else 0 :] if not _runtime(frame.file)]
        dependency = next((m for frame in libraries if (m := site_module(frame.file)) is not None), None)
    bodies = [site_module(frame.file) for frame in libraries if frame.function == "<module>"]
    innermost = next((module for module in reversed(bodies) if module is not None), None)
    if dependency is None or innermost is None or own(dependency) or own(innermost):
        return None
    return BrokenImport(dependency, innermost if innermost != dependency else None)


_EXTENSION_LOADING = ("create_module", "exec_module")  # ExtensionFileLoader: dlopen and PyInit_*, C code below


def _loading_extension(frames: list[Frame]) -> bool:
    """The innermost Python frame is importlib creating or executing a compiled extension module (a source module
    would have its own `<module>` frame below)."""
    inner = [frame for frame in reversed(frames) if frame.function != "_call_with_frames_removed"]
    return (
        bool(inner)
        and inner[0].file == "<frozen importlib._bootstrap_external>"
        and inner[0].function in _EXTENSION_LOADING
    )


def import_line(tree: ast.Module | None, module: str) -> int | None:
    """The line of the first top-level statement importing `module`'s package (`import torch`), None without."""
    top = module.split(".")[0]
    for node in tree.body if tree is not None else []:
        names = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and not node.level
            else []
        )
        if any(name.split(".")[0] == top for name in names):
            return node.lineno
    return None


def _import_started(frames: list[Frame], project: str, own: Callable[[str], bool]) -> tuple[str, list[Frame]] | None:
    """The third-party package whose module body the project's last frame started (its import statement; Python's
    own importlib frames between them), and the frames from that body on; None when the frame after the project's
    is a call (the project's doing) or in no installed package."""
    after = _after_project(frames, project)
    libraries = [frame for frame in after or [] if not _runtime(frame.file)]
    if not libraries or libraries[0].function not in ("<module>", None):  # None: a SyntaxError compiling it
        return None
    dependency = site_module(libraries[0].file)
    if dependency is None or own(dependency):
        return None
    return dependency, libraries


def _after_project(frames: list[Frame], project: str) -> list[Frame] | None:
    """The frames after the project's last one; None when no frame is the project's or the last frame is."""
    inside = [index for index, frame in enumerate(frames) if _in_project(frame.file, project)]
    if not inside or inside[-1] == len(frames) - 1:
        return None
    return frames[inside[-1] + 1 :]


def _in_project(file: str, project: str) -> bool:
    if file.startswith("<"):
        return False
    real = os.path.realpath(file)
    return real.startswith(project.rstrip(os.sep) + os.sep) and not set(_SITE_DIRS) & set(real.split(os.sep))


@functools.cache
def _standard_library() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple({os.path.realpath(paths[key]) + os.sep for key in ("stdlib", "platstdlib") if key in paths})


def _runtime(file: str) -> bool:
    """Python's own: importlib's frozen machinery, the standard library (`importlib.import_module`)."""
    if file.startswith("<"):
        return True
    real = os.path.realpath(file)
    return real.startswith(_standard_library()) and not set(_SITE_DIRS) & set(real.split(os.sep))


def site_module(file: str) -> str | None:
    """The installed package a file in site-packages belongs to (`numpy`; `google.protobuf` for a namespace
    package), None for a file elsewhere."""
    parts = os.path.realpath(file).split(os.sep) if not file.startswith("<") else []
    sites = [index for index, part in enumerate(parts) if part in _SITE_DIRS]
    if not sites or sites[-1] + 1 >= len(parts):
        return None
    site = sites[-1]
    top = parts[site + 1].split(".")[0]
    if not top.isidentifier():
        return None
    namespace = site + 2 < len(parts) and not os.path.exists(os.sep.join([*parts[: site + 2], "__init__.py"]))
    if namespace and os.path.isdir(os.sep.join(parts[: site + 2])) and parts[site + 2].split(".")[0].isidentifier():
        return f"{top}.{parts[site + 2].split('.')[0]}"
    return top


def installed_distribution(module: str) -> str | None:
    """ "numpy 2.2.6": the distribution installing `module` here and its version, None when not known."""
    top = module.split(".")[0]
    try:
        names = _packages_distributions().get(top, [])
        if len(names) > 1:  # a namespace (`google`): the distribution holding the module's directory
            folder = module.replace(".", "/") + "/"
            names = [n for n in names if any(str(f).startswith(folder) for f in _files(n))]
        if len(set(names)) != 1:
            return None
        distribution = importlib.metadata.distribution(names[0])
        return f"{distribution.metadata['Name']} {distribution.version}"
    except (importlib.metadata.PackageNotFoundError, OSError, ValueError):
        return None


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def _files(name: str) -> list:
    return list(importlib.metadata.distribution(name).files or [])
