"""Run the passes over files, apply selection and suppressions, merge and sort. Never prints.

The engine names no rule: what a rule contributes beyond its checks (how the trace confirms or withdraws its static
findings, which crashes it explains) comes from the rule's own hooks in mpdoctor.registry.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import functools
import os
import re
import stat
import time
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mpdoctor import static_workers
from mpdoctor.collector import fewer_collections
from mpdoctor.config import Config
from mpdoctor.crash_causes import caused_by_static
from mpdoctor.diagnostics import Confidence, Diagnostic, FileError, Report, SourceText
from mpdoctor.facts.dtypes import is_float16_compute
from mpdoctor.facts.trace_request import NumericsRequest, PlanRequest, StepCheckRequest
from mpdoctor.notebook import SUFFIX as NOTEBOOK_SUFFIX
from mpdoctor.notebook import NotebookError, is_notebook, read_notebook
from mpdoctor.printable import readable_name
from mpdoctor.project import target as targets_module
from mpdoctor.project.evidence import ModulesKeras
from mpdoctor.project.layout import not_model_code
from mpdoctor.reads import not_regular
from mpdoctor.registry import engine_code, get_rule, hooks, implemented_codes, static_checks
from mpdoctor.sources import read_source
from mpdoctor.spellings import Spellings
from mpdoctor.static.context import StaticContext
from mpdoctor.static.policy_context import FileContexts, PolicyContext, scopes_at
from mpdoctor.static.semantic import Settings
from mpdoctor.suppress import find_suppressions, is_suppressed

if TYPE_CHECKING:
    from typing import TypedDict

    from mpdoctor.cache import ResultCache
    from mpdoctor.facts.schema import TraceSummary
    from mpdoctor.notebook import Notebook
    from mpdoctor.project.projects import Projects
    from mpdoctor.project.target import Target

    class FileOptions(TypedDict):
        """The keyword arguments of `check_source` that the project analysis gives one file."""

        project: FileContexts | None
        tree: ast.Module | None

    # One file to check: (shown, source, notebook, arguments of check_source), in the report's order.
    FileCheck = tuple[str, SourceText, Notebook | None, FileOptions]
    # What checking one file gives: (diagnostics, error, traces, target).
    FileResult = tuple[list[Diagnostic], FileError | None, list[TraceSummary], Target | None]
    # The same with the pre-rendered texts of its diagnostics (None: nothing to pre-render).
    CheckedFile = tuple[list[Diagnostic], FileError | None, list[TraceSummary], Target | None, list[str] | None]
    # The trace's verdicts on static findings, by (code, line) or (code, line, column): None withdraws the finding,
    # ("confirm" | "downgrade", reason) keeps it (see static_after_trace).
    Verdicts = Mapping[tuple[str, int] | tuple[str, int, int], tuple[str, str] | None]

_T = TypeVar("_T")

# A file that mentions none of these cannot hold a finding: skip the rules (ruff/torchfix-style cheap path).
_MARKER = Spellings(r"tensorflow|keras|tensorflow_hub|mixed_precision")
# Tokenizing is slower than parsing: only files that may hold one of our comments pay for it.
_MAY_SUPPRESS = re.compile(r"noqa\s*:[^\n]*MP\d|mpdoctor\s*:", re.IGNORECASE)


def display_path(path: Path) -> str:
    """Relative to cwd when inside it (like ruff/mypy), else as given; bytes of a non-UTF-8 name as `\\xNN`, so
    every output format can encode it."""
    return readable_name(_relative_to_cwd(os.fspath(path)))


def _relative_to_cwd(text: str) -> str:
    """`os.path.relpath(text)` unless that leaves cwd (then `text`), without relpath where it is plain string
    work: relpath made every run of a big tree pay thousands of getcwd calls."""
    shown = os.path.normpath(text)
    if not os.path.isabs(text):
        if not shown.startswith(".."):
            return shown  # what relpath gives for a relative path that stays inside cwd
    elif os.sep == "/" and not shown.startswith("//"):  # POSIX (no drives, no case folding), not `//x` paths
        cwd = os.getcwd()
        inside = cwd if cwd.endswith("/") else cwd + "/"
        if shown == cwd:
            return "."
        if shown.startswith(inside):
            return shown[len(inside) :]
        return text  # outside cwd: as given
    try:
        shown = os.path.relpath(text)
    except ValueError:  # another drive (Windows)
        return text
    return text if shown.startswith("..") else shown


def collect_files(paths: Iterable[Path], config: Config) -> tuple[list[Path], list[FileError], list[FileError]]:
    """(files to check, errors, skipped). Only regular files are read: a FIFO, device or socket named on the command
    line is an error, one found in a walk is skipped with a note; unreadable directories and symlink loops are
    errors for that path, and the other files are still checked."""
    files: list[Path] = []
    errors: list[FileError] = []
    skipped: list[FileError] = []
    seen: set[tuple[int, int]] = set()

    def add(candidate: Path, explicit: bool) -> None:
        try:
            info = candidate.stat()
        except OSError as exc:
            errors.append(FileError(display_path(candidate), _stat_problem(exc), kind="io"))
            return
        problem = not_regular(info.st_mode)
        if problem:
            (errors if explicit else skipped).append(FileError(display_path(candidate), problem, kind="io"))
            return
        if (info.st_dev, info.st_ino) not in seen:  # the same file through two paths or links: once
            seen.add((info.st_dev, info.st_ino))
            files.append(candidate)

    for path in paths:
        try:
            info = path.stat()
        except OSError as exc:
            errors.append(FileError(display_path(path), _stat_problem(exc), kind="io"))
            continue
        if not stat.S_ISDIR(info.st_mode):
            add(path, explicit=True)  # named explicitly: always checked, like ruff without --force-exclude
            continue
        from mpdoctor.project.discovery import Excluder

        excluded = Excluder(config.root, config.exclude)  # Config.is_excluded on strings: pathlib is slow
        unreadable = functools.partial(_unreadable_directory, top=path, errors=errors)
        for root, dirs, names in os.walk(path, onerror=unreadable):
            dirs[:] = sorted(d for d in dirs if not excluded(os.path.join(root, d)))
            for name in sorted(names):
                if name.endswith((".py", NOTEBOOK_SUFFIX)) and not excluded(os.path.join(root, name)):
                    add(Path(root, name), explicit=False)
    return files, errors, skipped


def _unreadable_directory(exc: OSError, top: Path, errors: list[FileError]) -> None:
    where = Path(exc.filename) if exc.filename else top
    errors.append(FileError(display_path(where), f"cannot read directory: {_reason(exc)}", kind="io"))


def _stat_problem(exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return "no such file or directory"
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    return f"cannot read: {_reason(exc)}"


@dataclass(frozen=True)
class TraceOptions:
    enabled: bool = False
    timeout: float = 300.0
    entry: str | None = None
    checkpoints: tuple[str, ...] = ()  # --checkpoint: audited against the model's compute dtype
    numerics: NumericsRequest | None = None  # float16 vs float32 per layer: options for the child (mpdoctor.config)
    memory_limit_mb: float | None = None  # --trace-memory: the child is killed beyond this resident memory
    plan: PlanRequest | None = None  # `mpdoctor plan`: the plan request for the child (mpdoctor/plan.py)
    step_check: StepCheckRequest | None = None  # --fix verifying a training fix: the step to run (mpdoctor.fix.verify)
    jobs: int = 1  # files checked at once (--jobs): trace children, or static worker processes


def check_paths(
    paths: Iterable[Path],
    config: Config,
    trace: TraceOptions | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    collected: tuple[list[Path], list[FileError], list[FileError]] | None = None,
    shard: tuple[int, int] | None = None,
    cache: ResultCache | None = None,
    prerender: Callable[[Diagnostic], str] | None = None,
) -> Report:
    """`progress(index, total, shown)` is called before each file (the CLI draws it on a terminal). The report keeps
    the text of every file that has findings (`Report.sources`), for the renderers and --fix. `collected`: what
    `collect_files(paths, config)` returned, when the caller already walked the paths. `shard` (I, N): check only
    the I-th of N disjoint parts of the files (`--shard`); the project analysis still reads them all. `cache`: a
    mpdoctor.cache.ResultCache whose entries replace checking a file that has not changed. `prerender`: the one
    output format's text of a finding (mpdoctor.report.json_format.prerender), computed beside its check (in the
    worker processes, in parallel) and kept in Report.prerendered."""
    with fewer_collections():  # a fifth of the static pass was the garbage collector (mpdoctor/collector.py)
        return _check_paths(paths, config, trace, progress, collected, shard, cache, prerender)


def _check_paths(
    paths: Iterable[Path],
    config: Config,
    trace: TraceOptions | None,
    progress: Callable[[int, int, str], None] | None,
    collected: tuple[list[Path], list[FileError], list[FileError]] | None,
    shard: tuple[int, int] | None,
    cache: ResultCache | None,
    prerender: Callable[[Diagnostic], str] | None,
) -> Report:
    trace = trace or TraceOptions()
    targets_module.new_run()  # project files are read afresh, once per directory
    files, errors, skipped = collected or collect_files(paths, config)
    report = Report(
        errors=list(errors), skipped=list(skipped), passes=("static", "trace") if trace.enabled else ("static",)
    )
    projects = analyse_projects(list(paths), files, config)
    report.notes += projects.notes
    if shard is not None:
        report.shard = shard
        files = [path for path in files if in_shard(display_path(path), *shard)]
        report.errors = [error for error in report.errors if in_shard(error.path, *shard)]
        report.skipped = [skip for skip in report.skipped if in_shard(skip.path, *shard)]
    checks: list[FileCheck] = []  # (shown, source, notebook, arguments of check_source), in the report's order
    for path in files:
        shown = display_path(path)
        notebook: Notebook | None = None
        shared: tuple[str, ast.Module | None] | None = None
        try:
            if is_notebook(path):
                notebook = read_notebook(path)
                source = SourceText(path, notebook.source, notebook.cell_lines)
            else:
                shared = projects.take_source(path)  # read (maybe parsed) by the project analysis: once
                source = SourceText(path, shared[0] if shared else read_source(path))
        except NotebookError as exc:
            report.errors.append(FileError(shown, str(exc), kind="io"))
            continue
        except (OSError, UnicodeDecodeError, SyntaxError) as exc:
            report.errors.append(FileError(shown, f"cannot read file: {_reason(exc)}", kind="io"))
            continue
        project = projects.contexts_for(path)  # a notebook too: an entry point, its cells joined as analysed
        if project is not None:
            report.contexts[shown] = project
        options: FileOptions = {"project": project, "tree": shared[1] if shared else None}
        checks.append((shown, source, notebook, options))

    def check(shown: str, source: SourceText, notebook: Notebook | None, options: FileOptions) -> CheckedFile:
        """(diagnostics, error, traces, target, pre-rendered texts) of one file. Runs in a worker process when the
        static pass has several: everything the report needs from it is in what it returns."""
        diagnostics, error, traces, target = checked(shown, source, notebook, options)
        return (
            diagnostics,
            error,
            traces,
            target,
            [prerender(d) for d in diagnostics] if prerender is not None else None,
        )

    def checked(shown: str, source: SourceText, notebook: Notebook | None, options: FileOptions) -> FileResult:
        key = None

        def static_pass() -> list[Diagnostic]:
            """The fixes a cached result may replay: the ones derived from the source now (mpdoctor.cache)."""
            found, error = check_source(source.text, shown, config, path=str(source.path), **options)
            return notebook.map_results(shown, source.path, found, error, [])[0] if notebook is not None else found

        if cache is not None:
            key, target = _cache_key(cache, shown, source, options, config)
            cached = cache.load(key, shown, static_pass) if key is not None else None
            if cached is not None:
                return (*cached, target)
        started = time.time()
        traces: list[TraceSummary] = []
        targets: dict[str, Target] = {}
        diagnostics, error = check_source(
            source.text, shown, config, path=str(source.path), trace=trace, traces=traces, targets=targets, **options
        )
        if notebook is not None:
            diagnostics, error = notebook.map_results(shown, source.path, diagnostics, error, traces)
        if cache is not None and key is not None:
            cache.store(key, diagnostics, error, traces, started, static_pass)
        return diagnostics, error, traces, targets.get(shown)

    if trace.enabled and trace.jobs > 1:
        _start_trace_servers(checks, config, cache)
    results = _results_in_order(check, checks, trace, progress, processes=cache is None, notes=report.notes)
    with contextlib.closing(results):  # Ctrl-C, or an error here: the worker processes end now
        merged = zip(checks, results, strict=True)
        for (shown, source, _notebook, _options), (diagnostics, error, traces, target, texts) in merged:
            _merge_file(report, shown, source, diagnostics, error, traces, target)
            if texts is not None:
                report.prerendered.update((id(d), (d, text)) for d, text in zip(diagnostics, texts, strict=True))
    report.diagnostics.sort(key=Diagnostic.sort_key)
    if cache is not None:
        report.notes.append(cache.note())
    if trace.enabled:
        from mpdoctor.trace import forkserver

        report.notes += forkserver.notes()
        report.notes += _not_traced_notes(checks)
    return report


def _traced(text: str, path: str) -> bool:
    """Whether the trace runs the file: it names TensorFlow or Keras, and is model code (not setup.py, a test...)."""
    return _MARKER.found_in(text) and not_model_code(path) is None


def _not_traced_notes(checks: list[FileCheck]) -> list[str]:
    """--verbose: which files the trace left alone as not model code, and why (never silently)."""
    return [
        f"trace: {shown} not traced, {reason}: static findings only"
        for shown, source, _notebook, _options in checks
        if _MARKER.found_in(source.text) and (reason := not_model_code(str(source.path))) is not None
    ]


def _merge_file(
    report: Report,
    shown: str,
    source: SourceText,
    diagnostics: list[Diagnostic],
    error: FileError | None,
    traces: list[TraceSummary],
    target: Target | None,
) -> None:
    report.traces += traces
    if target is not None:
        report.targets[shown] = target
        report.notes += [note for note in target.project.notes if note not in report.notes]  # unreadable project files
    if error is None or error.kind != "syntax":  # a file that does not parse was not checked
        report.files_checked += 1
    if diagnostics:
        report.sources[shown] = source
    report.diagnostics += diagnostics
    if error:
        report.errors.append(error)


def _results_in_order(
    check: Callable[[str, SourceText, Notebook | None, FileOptions], CheckedFile],
    checks: list[FileCheck],
    trace: TraceOptions,
    progress: Callable[[int, int, str], None] | None,
    processes: bool,
    notes: list[str],
) -> Generator[CheckedFile, None, None]:
    """`check(*c)` for each of `checks`, in their order. The trace runs `trace.jobs` files at once in threads (what
    runs in parallel is the trace children, which the threads wait for); the static pass alone is Python code that
    threads would run one at a time: it runs in forked worker processes (mpdoctor.static_workers) where that pays
    off. `processes`: worker processes are allowed (not with the result cache, which counts its hits here)."""
    total = len(checks)
    sizes = [len(source.text) for _shown, source, _notebook, _options in checks]
    workers, note = static_workers.plan_workers(trace.jobs if processes and not trace.enabled else 1, sizes)
    if note is not None:
        notes.append(note)
    if workers > 1:
        # A generator (it has close()), though static_workers annotates it as an Iterator.
        with contextlib.closing(
            static_workers.results_in_order(check, checks, sizes, workers, [c[0] for c in checks])  # type: ignore[type-var]
        ) as results:
            for index, ((shown, *_rest), result) in enumerate(zip(checks, results, strict=True), start=1):
                if progress is not None:  # drawn as results arrive: a worker has no terminal to draw on
                    progress(index, total, shown)
                yield result
        return

    def announced(
        index: int, shown: str, source: SourceText, notebook: Notebook | None, options: FileOptions
    ) -> CheckedFile:
        if progress is not None:
            progress(index, total, shown)
        return check(shown, source, notebook, options)

    arguments = [(index, *c) for index, c in enumerate(checks, start=1)]
    yield from in_order(announced, arguments, trace.jobs if trace.enabled else 1)


def _start_trace_servers(checks: list[FileCheck], config: Config, cache: ResultCache | None) -> None:
    """Start the fork servers the traces will be forked from, without waiting for them: each imports TensorFlow
    for its environment (Keras 3, tf_keras), side by side, instead of when the first file of that environment comes
    up while the other jobs wait (on 20 small scripts that import was most of a --jobs 2 run). Not for a file whose
    result the cache holds, so a warm run starts none."""
    from mpdoctor.trace.checks import start_server_for

    for shown, source, notebook, options in checks:
        if notebook is not None or not _traced(source.text, str(source.path)):
            continue  # a notebook's environment is read from its generated program; its trace starts its own
        if cache is not None:
            key, target = _cache_key(cache, shown, source, options, config)
            if key is None or cache.holds(key):
                continue
        else:
            parsed, target = _file_target(shown, source, options, config)
            if not parsed:
                continue
        project = options["project"]
        context = project.trace_context() if project is not None else None
        start_server_for(str(source.path), target, context, config.keras_backend)


def _cache_key(
    cache: ResultCache, shown: str, source: SourceText, options: FileOptions, config: Config
) -> tuple[str | None, Target | None]:
    """(key, target) of a file for the result cache; (None, None) for a file that does not parse (never cached)."""
    parsed, target = _file_target(shown, source, options, config)
    if not parsed:
        return None, None
    constants = imported_constants(str(source.path), source.text, config)  # another module's policy constant
    inputs = (options["project"], sorted((name, ast.dump(value)) for name, value in constants.items()))
    return cache.key(shown, source.path, source.text, target, inputs), target


def _file_target(shown: str, source: SourceText, options: FileOptions, config: Config) -> tuple[bool, Target | None]:
    """(whether the file parses, its resolved target); the tree is kept in `options` so it is parsed once."""
    tree = options["tree"]
    if tree is None:
        tree, _error = parse_source(source.text, shown)
        if tree is None:
            return False, None
        options["tree"] = tree
    modules = modules_keras(str(source.path), config)
    return True, targets_module.target_for(
        str(source.path), tree, source.text, settings_for(config).overrides, modules=modules
    )


def modules_keras(path: str | None, config: Config) -> ModulesKeras | None:
    """What the modules that run with the file at `path` say about their Keras (one project, one target)."""
    from mpdoctor.project.running_together import modules_keras as choice

    return choice(path, _excluder(config.root, tuple(config.exclude)))


def imported_constants(path: str | None, text: str, config: Config) -> dict[str, ast.AST]:
    """The string constants of the project modules the file imports, by the dotted name it uses for them."""
    if path is None:
        return {}
    from mpdoctor.project.running_together import imported_constants as constants

    return constants(path, text, _excluder(config.root, tuple(config.exclude)))


@functools.lru_cache(maxsize=8)
def _excluder(root: Path, patterns: tuple[str, ...]) -> Callable[[str], bool]:
    from mpdoctor.project.discovery import Excluder

    return Excluder(root, patterns)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def in_order(function: Callable[..., _T], arguments: list[tuple[Any, ...]], jobs: int) -> Iterator[_T]:
    """`function(*a)` for each tuple of `arguments`, yielded in their order, `jobs` at a time in threads (the work
    that runs in parallel is the trace children's; the threads wait for them). Ctrl-C or SIGTERM ends every child
    still running before it propagates."""
    if jobs <= 1 or len(arguments) <= 1:
        yield from (function(*a) for a in arguments)
        return
    from concurrent.futures import ThreadPoolExecutor

    from mpdoctor.trace.processes import end_all

    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="mpdoctor-check")
    try:
        futures = [pool.submit(function, *a) for a in arguments]
        for future in futures:
            yield future.result()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        end_all()
        raise
    pool.shutdown(wait=True)


def file_targets(paths: Iterable[Path], config: Config) -> tuple[list[tuple[str, Target]], list[FileError]]:
    """(display path, resolved target) of every file `check` would check, for `check --show-target`."""
    targets_module.new_run()
    files, errors, _skipped = collect_files(paths, config)
    found = []
    for path in files:
        shown = display_path(path)
        try:
            text = read_notebook(path).source if is_notebook(path) else read_source(path)
        except NotebookError as exc:
            errors.append(FileError(shown, str(exc), kind="io"))
            continue
        except (OSError, UnicodeDecodeError, SyntaxError) as exc:
            errors.append(FileError(shown, f"cannot read file: {_reason(exc)}", kind="io"))
            continue
        parsed = parse_source(text, shown)
        if parsed[0] is None:
            errors.append(parsed[1])
            continue
        overrides = settings_for(config).overrides
        modules = modules_keras(str(path), config)
        found.append((shown, targets_module.target_for(str(path), parsed[0], text, overrides, modules=modules)))
    return found, errors


def in_shard(shown: str, index: int, count: int) -> bool:
    """Shard I of N (from 1) holds the files whose path hashes to it: stable when other files come and go."""
    import hashlib  # only for --shard: the start-up of every other run need not pay for it

    digest = hashlib.sha256(shown.replace(os.sep, "/").encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big") % count == index - 1


def analyse_projects(paths: list[Path], files: list[Path], config: Config) -> Projects:
    """The policy contexts entry points elsewhere in each project put the checked files' code under (issue 21)."""
    from mpdoctor.project.discovery import Excluder
    from mpdoctor.project.projects import analyse_projects as analyse

    return analyse(
        paths, files, Excluder(config.root, config.exclude), functools.cache(lambda p: display_path(Path(p)))
    )


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def parse_source(text: str, shown: str) -> tuple[ast.Module, None] | tuple[None, FileError]:
    line: int | None
    column: int | None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences in user code are not our business
            return ast.parse(text, filename=shown), None
    except SyntaxError as exc:
        line, column = exc.lineno or 1, exc.offset or 1
        if "\0" in text and "null bytes" in str(exc.msg):  # the parser says line 1: point at the byte itself
            line, column = _first_nul(text)
        return None, FileError(shown, f"syntax error: {exc.msg}", line, column, kind="syntax")
    except ValueError as exc:  # null bytes, in the Python versions that raise ValueError for them
        line, column = _first_nul(text)
        return None, FileError(shown, f"cannot parse: {exc}", line, column, kind="syntax")
    except (RecursionError, MemoryError) as exc:  # Python's parser gives up on pathological nesting
        reason = str(exc) or "too deeply nested or too large"
        return None, FileError(shown, f"cannot parse: {reason} ({type(exc).__name__})", kind="syntax")


def _first_nul(text: str) -> tuple[int | None, int | None]:
    """Line and column (from 1) of the first NUL character, where the parser refused the file."""
    at = text.find("\0")
    if at < 0:
        return None, None
    line_start = text.rfind("\n", 0, at) + 1
    return text.count("\n", 0, at) + 1, at - line_start + 1


def check_source(
    text: str,
    shown: str,
    config: Config,
    path: str | None = None,
    trace: TraceOptions | None = None,
    traces: list[TraceSummary] | None = None,
    run_from: str | None = None,
    project: FileContexts | None = None,
    tree: ast.Module | None = None,
    targets: dict[str, Target] | None = None,
) -> tuple[list[Diagnostic], FileError | None]:
    """Static (and, when enabled, trace) pass over one file: diagnostics after selection and suppression, or a
    parse error. A file that does not parse is never run. `run_from`: a file holding `text` that the trace runs
    as if it were `path` (to verify a fix before writing it). `project`: the policy contexts entry points elsewhere
    in the project call this file's code under; `tree`: `text` already parsed. `targets`: receives the file's
    resolved TensorFlow/Keras target under `shown`."""
    if tree is None:
        tree, error = parse_source(text, shown)
        if tree is None:
            return [], error
    settings = replace(
        settings_for(config),
        project=project,
        modules=modules_keras(path, config),
        imported_constants=imported_constants(path, text, config),
    )
    raw, internal = _static_diagnostics(text, shown, tree, config, path, settings)
    if settings.target is None:  # no static check built a context (that resolves it from its own walk)
        settings.target = targets_module.target_for(
            path or shown, tree, text, settings.overrides, modules=settings.modules
        )
    if targets is not None:
        targets[shown] = settings.target
    if project is not None and project.low_precision and raw:
        # The file on its own, for the codes found only: which findings exist only under the project's contexts
        alone, _ = _static_diagnostics(text, shown, tree, config, path, settings.alone(), {d.code for d in raw})
        raw = _in_context(raw, alone, project, tree)
    passes = "S"
    if trace is not None and trace.enabled and _traced(text, path or shown):
        from mpdoctor.trace.checks import trace_diagnostics

        context = project.trace_context() if project is not None else None
        elsewhere = functools.partial(static_findings_of, config=config)  # a failure surfacing in another module
        traced, verdicts = trace_diagnostics(
            path or shown, shown, text, tree, config, settings, trace, traces, run_from, context, elsewhere
        )
        if project is not None and context is not None:  # named with the contexts that reach each finding's code
            scopes = [_scopes_of(d, shown, tree) for d in traced]
            named = [(d, s, project.traced_finding_context(s, context)) for d, s in zip(traced, scopes, strict=True)]
            traced = [
                _noted(_named(d, c), project.untraced_policies(s, context)) if c is not None else d
                for d, s, c in named
                if c is not None or d.code in (engine_code("run_failed"), engine_code("cannot_trace"))  # no dtype claim
            ]
        raw = merge_passes(static_after_trace(raw, verdicts or {}), traced)
        passes = "S" if verdicts is None else "ST"  # no trace rule ran: their suppressions may be needed later
    return finish(raw, text, shown, config, ran_passes=passes), internal


def static_findings_of(path: str, config: Config) -> list[Diagnostic]:
    """Another file's static findings, as a check of it alone reports them (a trace failure surfacing in it)."""
    with contextlib.suppress(OSError, UnicodeDecodeError, SyntaxError):
        return check_source(read_source(Path(path)), display_path(Path(path)), config, path=path)[0]
    return []


def settings_for(config: Config) -> Settings:
    return Settings(
        keras_version=config.keras_version,
        assumed_policy=config.assume_policy,
        target_tensorflow=config.target_tensorflow,
        target_origin=config.target_tensorflow_origin,
        keras_origin=config.keras_version_origin,
        keras_backend=config.keras_backend,
    )


def _static_diagnostics(
    text: str,
    shown: str,
    tree: ast.Module,
    config: Config,
    path: str | None,
    settings: Settings,
    only: set[str] | None = None,
) -> tuple[list[Diagnostic], FileError | None]:
    """`only`: run just the checks that can raise one of these codes."""
    raw: list[Diagnostic] = []
    internal: FileError | None = None
    if not _MARKER.found_in(text):
        return raw, internal
    ctx = None  # built only for a file some check may fire on: most files of a big tree need none
    float16_assumed = (
        is_float16_compute(config.assume_policy)
        or (settings.project is not None and settings.project.low_precision)
        or any(  # a low-precision policy in a constant of an imported module: the text need not spell it
            isinstance(v, ast.Constant) and isinstance(v.value, str) and is_float16_compute(v.value)
            for v in (settings.imported_constants or {}).values()
        )
    )
    seen: dict[str, bool] = {}
    for check in static_checks():
        if not any(config.enabled(c, shown) for c in check.codes) or not check.may_fire(text, float16_assumed, seen):
            continue
        if only is not None and not only.intersection(check.codes):
            continue
        ctx = ctx or StaticContext(path or shown, shown, text, tree, settings)
        name = check.fn.__name__
        try:
            raw.extend(check.fn(ctx))
        except RecursionError:
            internal = FileError(shown, f"internal error: {name} gave up on deeply nested code", kind="internal")
        except Exception as exc:  # a bug in one rule must not hide the others' findings
            internal = FileError(shown, f"internal error in {name}: {type(exc).__name__}: {exc}", kind="internal")
    if ctx is not None:
        ctx.release()  # the tree is then freed by reference counting, not by the garbage collector
    return raw, internal


def _in_context(
    found: list[Diagnostic], alone: list[Diagnostic], project: FileContexts, tree: ast.Module
) -> list[Diagnostic]:
    """The findings that exist only under the project's policy contexts (not in the file checked `alone`) name the
    context they were found in: the one of the innermost function or class around them that has one."""
    before = {(d.code, d.location.line, d.location.column) for d in alone}
    result = []
    for d in found:
        if (d.code, d.location.line, d.location.column) in before:
            result.append(d)
            continue
        context = project.context_for(scopes_at(tree, d.location.line), d.message)
        result.append(_named(d, context) if context is not None else d)
    return result


def _named(d: Diagnostic, context: PolicyContext) -> Diagnostic:
    """`d` with its policy context named once in the message and carried in full: inside the parenthesis that
    already names the policy (`(policy "mixed_float16", set in train.py:4)`), else as one suffix."""
    if d.context is not None:
        return d
    message = f"{d.message} ({context.describe()})"
    if context.origin is not None and context.policy:
        named = next(
            (p for p in (f'(policy "{context.policy}")', f"(policy {context.policy})") if p in d.message), None
        )
        if named is not None:
            message = d.message.replace(named, f"{named[:-1]}, {context.set_in()})", 1)
    return replace(d, message=message, context=context.for_diagnostic())


def _noted(d: Diagnostic, note: str | None) -> Diagnostic:
    return replace(d, notes=(*d.notes, note)) if note else d


def _scopes_of(d: Diagnostic, shown: str, tree: ast.Module) -> list[str] | None:
    """The scopes around a finding of the checked file (None: it points into another file)."""
    return scopes_at(tree, d.location.line) if d.location.path == shown else None


def static_after_trace(static: list[Diagnostic], verdicts: Verdicts) -> list[Diagnostic]:
    """Static findings with the trace's verdicts applied, {(code, line) or (code, line, column): None (drop) |
    ("confirm" | "downgrade", reason)}: confirmed ones become static+trace, high confidence; downgraded ones info,
    low confidence; both get the reason as a note."""
    from mpdoctor.diagnostics import Severity

    kept = []
    for d in static:
        key = next(
            (k for k in ((d.code, d.location.line, d.location.column), (d.code, d.location.line)) if k in verdicts),
            None,
        )
        if key is None:
            kept.append(d)
        elif (found := verdicts[key]) is not None:
            verdict, reason = found
            if verdict == "confirm":
                kept.append(
                    replace(d, passes=("static", "trace"), confidence=Confidence.HIGH, notes=d.notes + (reason,))
                )
            else:
                kept.append(replace(d, severity=Severity.INFO, confidence=Confidence.LOW, notes=d.notes + (reason,)))
    return kept


def merge_passes(static: list[Diagnostic], traced: list[Diagnostic]) -> list[Diagnostic]:
    """One diagnostic per problem: a trace finding of the same code on the same line as a static one confirms
    it (passes static+trace, high confidence, the trace's observed message, whichever fix exists). A crash (MP001)
    that a static finding's rule says it caused is left out (mpdoctor.crash_causes)."""
    by_key = {(d.code, d.location.path, d.location.line): d for d in static}
    merged = list(static)
    for t in traced:
        if caused_by_static(t, static):
            continue
        s = by_key.pop((t.code, t.location.path, t.location.line), None)
        if s is None:  # no static finding, or one already confirmed by another trace finding on that line
            merged.append(t)
            continue
        merged[merged.index(s)] = replace(
            t,
            location=replace(s.location, layer=t.location.layer or s.location.layer),
            passes=("static", "trace"),
            confidence=Confidence.HIGH,
            fix=t.fix or s.fix,
            notes=tuple(dict.fromkeys(t.notes + s.notes)),
            context=t.context or s.context,
        )
    return merged


def finish(raw: list[Diagnostic], text: str, shown: str, config: Config, ran_passes: str) -> list[Diagnostic]:
    """Select, dedupe, suppress, and report unused suppressions (MP002)."""
    selected: dict[tuple[str, int, int, str | None], Diagnostic] = {}
    for d in raw:
        if config.enabled(d.code, shown):
            selected.setdefault((d.code, d.location.line, d.location.column, d.location.layer), d)
    suppressions = find_suppressions(text) if _may_suppress(text) else []
    kept = [
        d
        for d in selected.values()
        if not is_suppressed(suppressions, d.code, (d.location.line, d.location.end_line or d.location.line))
    ]
    for check in hooks("suppressions"):
        if config.enabled(check.codes[0], shown):
            kept += check.fn(suppressions, shown, text, lambda code: _could_have_run(code, config, shown, ran_passes))
    return sorted(kept, key=Diagnostic.sort_key)


def _may_suppress(text: str) -> bool:
    """A suppression comment may be in the text. The words first (a lower-case copy and two C searches): the
    regular expression's alternation alone cost 30 microseconds a file, at every position of the text."""
    lowered = text.lower()
    return ("noqa" in lowered or "mpdoctor" in lowered) and _MAY_SUPPRESS.search(text) is not None


def _could_have_run(code: str, config: Config, shown: str, ran_passes: str) -> bool:
    try:
        rule = get_rule(code)
    except KeyError:
        return True  # a code we do not know is certainly unused
    return config.enabled(code, shown) and any(p in ran_passes for p in rule.passes) and code in implemented_codes()
