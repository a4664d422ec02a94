"""The trace child: `python -m mpdoctor.trace.child REQUEST.json RESULT.json`.

Imports TensorFlow (or Keras alone on its JAX or PyTorch backend: backends.py), installs the hooks, imports the
user's file as a module (training at module level is a dry run: dry_run.py), finds its models, builds and calls
them once, and writes the facts (mpdoctor.facts.schema, version 1) to RESULT.json. Whatever happens, it tries to
write what it recorded. Only when importing it built no model and it has no zero-argument builder does its
`if __name__ == "__main__":` block run, stopped at its first training call (main_run.py).

An exception of mpdoctor's own (installing the hooks on a Keras the adapters do not fit, a hook, the child's
analysis) becomes `facts.tool_failure`, never the user's exception: the parent reports that mpdoctor cannot trace
here and keeps the static findings.
"""

from __future__ import annotations
import __future__

import ast
import importlib.machinery
import importlib.util
import json
import linecache
import os
import sys

from mpdoctor.facts.schema import ExceptionRecord, Facts, new_facts
from mpdoctor.facts.trace_request import NumericsRequest, TraceRequest
from mpdoctor.trace.child import (
    backends,
    crash_log,
    dry_run,
    hooks,
    inputs,
    keras_adapter,
    main_run,
    manual_restores,
    stop,
)
from mpdoctor.trace.child.analysis import (
    analyse_model,
    collect,
    describe,
    environment,
    user_frame,
)
from mpdoctor.trace.child.discovery import EntryNotFound, created_models, discover


def main(argv: list[str]) -> int:
    request_path, result_path = argv
    inputs.start()  # before TensorFlow's import, which reads keras.json and variables (a fork has started already)
    with open(request_path, encoding="utf-8") as handle:
        request = TraceRequest.from_json(json.load(handle))
    crash_log.enable(request.crash_log)  # a fatal signal's stack, for the parent (a native library's crash)
    facts = new_facts()
    recorder = hooks.Recorder(request.file, request.scratch)
    stop.install(recorder.user_file)  # the parent's timeout stops the run; what ran before is still written
    try:
        tree = _prepare(request, facts, recorder)
    except BaseException as exc:
        if not stop.is_timeout(exc):  # (importing TensorFlow outlasted the timeout)
            recorder.failed("hooks", "installing the hooks", exc)
    else:
        _run(request, facts, recorder, tree)
        keras_adapter.check_unhooked(recorder)
    try:
        collect(recorder, facts)
        facts.inputs = inputs.collect(facts, request.file, os.path.dirname(os.path.abspath(result_path)))
    except BaseException as exc:
        if not stop.is_timeout(exc):
            recorder.failed("child", "collecting the facts", exc)
    if stop.requested() is not None:
        facts.timeout = stop.requested()
        if facts.status == "ok":
            facts.status = "timeout"
    facts.tool_failure = recorder.tool_failure
    _write(result_path, facts)
    return 0


def _prepare(request: TraceRequest, facts: Facts, recorder: hooks.Recorder) -> ast.Module:
    with open(request.source_file or request.file, encoding="utf-8", errors="replace") as handle:
        source = handle.read()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = ast.Module(body=[], type_ignores=[])  # the parent parsed it; a file changed since gets defaults
    if backends.tensorflow():
        keras_adapter.honour_legacy_request(tree)
        import tensorflow  # before the hooks, which wrap its APIs

        version = getattr(tensorflow, "__version__", None)
    else:  # JAX or PyTorch: Keras 3 alone, TensorFlow never imported (mpdoctor.trace.child.backends)
        import keras  # noqa: F401

        version = None
    facts.environment = environment()  # first: a failure to install the hooks is reported with it
    wanted = keras_adapter.flavours(tree, version)
    if request.policy:  # before the hooks: the project's entry point set it, not this file
        keras_adapter.set_global_policy(request.policy, wanted)
    keras_adapter.install(hooks.Hooks(recorder), wanted)
    for model_class in keras_adapter.model_classes():  # training in the file runs a batch or two (dry_run)
        dry_run.install(model_class)
    more = hooks.Hooks(recorder)  # hand-written restores: arrays assigned to variables (manual_restores)
    manual_restores.install(recorder, more)
    more.patch()
    main_run.watch_arguments()
    return tree


def _run(request: TraceRequest, facts: Facts, recorder: hooks.Recorder, tree: ast.Module) -> None:
    """Import the user's file, find its models (running it as `__main__` when importing found none) and analyse
    each. The user's exceptions become facts.exception; any other exception reaching here is mpdoctor's own, or the
    parent's timeout (stop.py)."""
    models = None
    try:
        recorder.extra_checkpoints = request.checkpoints
        if request.notebook:
            _notebook_builtins()
        if request.plan is not None:  # the same weights on every run (a file that seeds itself wins): same plan
            from mpdoctor.trace.child.numerics import SEED, seed_random

            seed_random(SEED)
        stop.enter("import")
        module = _import_user_file(request, facts, recorder, tree)
        facts.layers_created_on_import = len(recorder.layers)
        stop.enter("build")

        def describing(exc: BaseException, phase: str) -> ExceptionRecord:
            return describe(exc, phase, recorder)

        models = discover(module, request.entry, recorder, facts, describing)
        if not models and request.entry is None and not request.notebook:
            models = _models_of_main(module, tree, request, facts, recorder, describing)
        for name, how, model in models:
            if stop.requested() is not None:  # out of time: the rest only from their graphs
                _analyse_after_timeout(models, recorder, facts)
                return
            stop.enter("analysis")
            facts.models.append(analyse_model(name, how, model, recorder, facts, request.numerics))
            recorder.analysed_models.append(model)
            if stop.requested() is not None:  # the model's own analysis ran out of time
                continue
            if request.numerics is None or request.numerics.enabled:  # MP504: a model the file trains
                from mpdoctor.trace.child.gradients import gradient_record

                facts.models[-1].gradients = gradient_record(
                    model, facts.models[-1], module, request.numerics, steps=request.training_steps
                )
            if request.plan is not None:  # `mpdoctor plan`: after the model's analysis, on the same objects
                from mpdoctor.trace.child.plan import plan_model

                record = facts.models[-1]
                record.plan = plan_model(model, record, recorder, request.plan, request.numerics, module)
        # verifying a loss-scaling fix: its training step against float32
        if request.step_check and stop.requested() is None:
            from mpdoctor.trace.child.step_check import step_check

            facts.step_check = step_check(module, recorder.analysed_models, request.step_check, request.numerics)
    except EntryNotFound as exc:  # the command line named what the file does not define: the user's to fix
        if facts.exception is None:
            facts.exception = describe(exc, "internal", recorder)
            facts.status = "exception"
    except BaseException as exc:
        if not stop.is_timeout(exc):
            recorder.failed("child", None, exc)
        elif models is not None:  # out of time in a model's gradients, plan or step check
            _analyse_after_timeout(models, recorder, facts)


def _models_of_main(module, tree: ast.Module, request: TraceRequest, facts: Facts, recorder, describing) -> list:
    """Importing the file built no model and it has no zero-argument builder: its `if __name__ == "__main__":`
    blocks run as `python file.py` runs them, until the first training call (main_run.py); the models they built.
    Not after an exception of the import (the run as its user runs it would have stopped there), nor the timeout,
    nor for a script that uses neither TensorFlow, Keras nor its project's modules (a download tool)."""
    blocks = main_run.main_blocks(tree)
    if not blocks or facts.exception is not None or stop.requested() is not None:
        return []
    if not main_run.reaches_model_code(module, request.root):
        return []
    stop.enter("main")
    try:
        main_run.run_as_main(module, blocks, request.file, recorder, facts, describing)
    except BaseException as exc:
        if not stop.is_timeout(exc):
            raise
    stop.enter("build")
    return created_models(module, recorder, facts, describing)


def _analyse_after_timeout(models, recorder, facts: Facts) -> None:
    """The found models not analysed yet, from their layer graphs alone: no call of the model (the call may be what
    ran out of time) and no numerics, so the child writes its facts within the parent's grace period."""
    for name, how, model in models:
        if any(model is done for done in recorder.analysed_models):
            continue
        facts.models.append(
            analyse_model(name, how, model, recorder, facts, NumericsRequest(enabled=False), call=False)
        )
        recorder.analysed_models.append(model)


def _notebook_builtins() -> None:
    """What IPython provides to every cell and notebooks use freely: `display` (a no-op here)."""
    import builtins

    if not hasattr(builtins, "display"):
        builtins.display = lambda *objects, **kwargs: None


class _SourceAsFileLoader(importlib.machinery.SourceFileLoader):
    """Loads `path` but reads its text from another file: the module's `__file__`, code filename and directory on
    sys.path are the original's, so paths computed from `__file__` and tracebacks still point at the user's file."""

    def __init__(self, fullname: str, path: str, source: str, notebook: bool = False) -> None:
        super().__init__(fullname, path)
        self.source = source
        self.notebook = notebook

    def get_data(self, path: str) -> bytes:
        with open(self.source, "rb") as handle:
            return handle.read()

    def source_to_code(self, data, path, *, _optimize=-1):  # type: ignore[override]
        text = importlib.util.decode_source(data)
        _serve_lines(path, text)
        if not self.notebook:
            return super().source_to_code(data, path, _optimize=_optimize)
        text, flags = hoist_future_imports(text)
        return compile(text, path, "exec", flags=flags, dont_inherit=True, optimize=_optimize)

    def path_stats(self, path: str):
        raise OSError("never cache bytecode of a candidate fix")


def _serve_lines(path: str, text: str) -> None:
    """linecache (inspect.getsource) answers `text` for `path`, never the user's file on disk: AutoGraph converts a
    tf.function's code and a tf_keras layer's `call` from that source and runs the conversion, so a candidate fix
    would run unfixed (AutoGraph also calls linecache.updatecache itself, which rereads the disk)."""
    lines = text.splitlines(keepends=True)
    entry = (len(text), None, lines, path)  # mtime None: checkcache leaves it
    linecache.cache[path] = entry
    reread = linecache.updatecache

    def updatecache(filename: str, module_globals: dict | None = None) -> list[str]:
        if filename != path:
            return reread(filename, module_globals)
        linecache.cache[path] = entry
        return lines

    linecache.updatecache = updatecache


def hoist_future_imports(text: str) -> tuple[str, int]:
    """A notebook's cells joined, its `from __future__` imports (valid at the top of any cell: IPython compiles
    each cell on its own) turned into `pass` on the same lines, and the compiler flags they set: the cells then
    compile as one module with every line where it was. Text that does not parse is left as it is."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return text, 0
    lines = text.splitlines(keepends=True)
    flags = 0
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__" and node.end_lineno is not None:
            for alias in node.names:
                feature = getattr(__future__, alias.name, None)
                flags |= getattr(feature, "compiler_flag", 0)
            first, last = node.lineno - 1, node.end_lineno - 1
            if first == last:  # what follows on its line (`; import os`) stays
                lines[first] = lines[first][: node.col_offset] + "pass" + lines[first][node.end_col_offset :]
                continue
            lines[first] = lines[first][: node.col_offset] + "pass\n"
            for index in range(first + 1, last + 1):
                lines[index] = "\n"
    return "".join(lines), flags


def _import_user_file(request: TraceRequest, facts: Facts, recorder, tree: ast.Module):
    """Import the file as the project's tooling would (mpdoctor.project.layout): its roots on sys.path, a module
    inside a package by its dotted name after its parent package, as `python -m` does, so that its relative imports
    work. `request.source_file`: read the module's text from there (a candidate fix, a notebook's cells), the module
    being `request.file` all the same."""
    path, source_file = request.file, request.source_file
    directory = os.path.dirname(os.path.abspath(path))
    for place in reversed(request.search_path):
        if place not in sys.path:
            sys.path.insert(0, place)
    if directory not in sys.path:  # a package's directory last: its modules must not shadow top-level ones
        sys.path.insert(len(sys.path) if request.module else 0, directory)
    sys.argv = [path]  # as `python file.py` has it: never the child's own arguments (argparse, setuptools)
    data_directory = None if request.notebook else main_run.data_directory(tree, path)
    if data_directory is not None:  # its data is found from its own directory: run from there, as its user does
        os.chdir(data_directory)
        main_run.entry_run(facts).cwd = data_directory
    if request.stub_missing:
        _install_stand_ins(request, facts)
    name = request.module or "__mpdoctor_model__"
    loader = _SourceAsFileLoader(name, path, source_file, request.notebook) if source_file else None
    package = [directory] if os.path.basename(path) == "__init__.py" else None
    spec = importlib.util.spec_from_file_location(name, path, loader=loader, submodule_search_locations=package)
    module = importlib.util.module_from_spec(spec)
    try:
        parent = name.rpartition(".")[0]
        if parent:
            importlib.import_module(parent)
        if name in sys.modules and source_file is None:  # the package imported it: that is the module
            return sys.modules[name]
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except SystemExit as exc:
        facts.exception = ExceptionRecord(
            "SystemExit", f"the file called sys.exit({exc.code!r}) on import", "import", user_frame(exc, recorder)
        )
        facts.status = "exception"
        main_run.note_missing_arguments(exc, "", facts)
    except BaseException as exc:
        if not stop.is_timeout(exc):  # out of time: the module as far as it ran, its models found from there
            facts.exception = describe(exc, "import", recorder)
            facts.status = "exception"
            main_run.note_missing_arguments(exc, facts.exception.traceback or "", facts)
    return module


def _install_stand_ins(request: TraceRequest, facts: Facts) -> None:
    """--stub-missing: stand-ins for the missing modules the user's code (the project's files, never an installed
    library's) imports; `facts.stand_ins` is the finder's own list of them, filled as they are imported."""
    from mpdoctor.trace.child.stand_ins import StandInFinder, install

    own = frozenset(request.own_modules)
    file = os.path.realpath(request.file)
    project = (request.root or os.path.dirname(file)) + os.sep
    installed = tuple({os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})

    def user_file(path: str) -> bool:
        real = os.path.realpath(path)
        if real == file:
            return True
        return real.startswith(project) and not real.startswith(installed) and "site-packages" not in real

    def source_of(path: str) -> str | None:
        if request.source_file and os.path.realpath(path) == file:  # a notebook's cells, a candidate fix
            with open(request.source_file, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        return None

    finder = StandInFinder(user_file, own.__contains__, source_of)
    facts.stand_ins = finder.used  # the same list: what the run imports until the facts are written
    install(finder)


def _write(path: str, facts: Facts) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(facts.to_json(), handle, default=str)
    os.replace(tmp, path)
