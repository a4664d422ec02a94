"""Runs one corpus entry the way its user would and records the Keras models it builds (the ground truth of
bench/real_repos.py). Run by bench/real_repos.py --ground-truth in the interpreter being measured:

    python bench/_real_repos_probe.py OUT.json NOTEBOOK      (a notebook)
    MPD_PROBE_OUT=OUT.json python FILE [ARG...]               (a script, with this module loaded by a sitecustomize)

A script runs as the user runs it (`python FILE ARG...`, exit status and uncaught error recorded); a notebook runs
cell by cell in an IPython shell, stopping at the first failing cell as "Run All" does, with shell escapes
(`!pip install`, `!git clone`) not run (the corpus is in place; what a `!pip` cell installs is declared).
Every `keras.Model` whose construction finishes is recorded with the global dtype policy in force then. Keras
is imported before the entry so that the hook is in place; no entry of the corpus selects its Keras through the
environment.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any


def _hook_models(built: list[dict[str, str]]) -> None:
    import keras

    original = keras.layers.Layer.__init__

    def recording_init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if isinstance(self, keras.Model) and not any(entry["id"] == str(id(self)) for entry in built):
            policy = keras.mixed_precision.global_policy().name
            built.append({"id": str(id(self)), "class": type(self).__name__, "policy": policy})

    keras.layers.Layer.__init__ = recording_init  # type: ignore[method-assign]


def _run_notebook(path: Path) -> str | None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.system = lambda cmd: None  # type: ignore[method-assign]
    shell.system_raw = lambda cmd: None  # type: ignore[method-assign]
    shell.getoutput = lambda cmd, split=True, depth=0: []  # type: ignore[method-assign]
    # `%matplotlib inline` needs a kernel's GUI loop; headless, matplotlib's Agg backend stands in for it.
    shell.enable_matplotlib = lambda gui=None: (None, None)  # type: ignore[method-assign]
    sys.path[0] = ""  # a kernel imports from its working directory, not from this script's
    cells = [cell for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"]
    for number, cell in enumerate(cells, 1):
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        result = shell.run_cell(source, store_history=True)
        error = result.error_before_exec or result.error_in_exec
        if error is not None:
            return f"code cell {number}: {type(error).__name__}: {error}"
    return None


def install() -> None:
    """The sitecustomize side: record the models built by `python FILE ARG...` and its uncaught error at exit."""
    import atexit
    import os

    built: list[dict[str, str]] = []
    errors: list[str] = []
    _hook_models(built)
    original_hook = sys.excepthook

    def recording_hook(kind: type[BaseException], error: BaseException, tb: Any) -> None:
        frames = traceback.extract_tb(tb)
        where = next(
            (f"{Path(f.filename).name}:{f.lineno}" for f in reversed(frames) if "site-packages" not in f.filename), ""
        )
        errors.append(f"{kind.__name__}: {error} ({where})")
        original_hook(kind, error, tb)

    sys.excepthook = recording_hook
    atexit.register(lambda: _write(os.environ["MPD_PROBE_OUT"], built, errors[0] if errors else None))


def _write(out: str, built: list[dict[str, str]], error: str | None) -> None:
    models = [{"class": entry["class"], "policy": entry["policy"]} for entry in built]
    Path(out).write_text(json.dumps({"models": models, "error": error}))


def main() -> None:
    """The notebook side: `python _real_repos_probe.py OUT.json NOTEBOOK`."""
    out, entry = sys.argv[1:]
    built: list[dict[str, str]] = []
    error: str | None
    try:
        _hook_models(built)
        error = _run_notebook(Path(entry).resolve())
    except BaseException as failure:
        error = f"{type(failure).__name__}: {failure}"
    _write(out, built, error)


if __name__ == "__main__":
    main()
