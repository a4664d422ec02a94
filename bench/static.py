"""Static-pass throughput against baselines measured in the same run (issue 2, issue 8 and issue 17 targets).

    python bench/static.py [--quick] [--json]

1. Corpus: the .py files of the installed `keras` and `tf_keras` packages (real Keras source), falling back to this
   repository's fixtures and examples; the static pass in-process (one process) against reading + `ast.parse` of
   the same files. Target: ratio <= 3.
2. Start-up of `mpdoctor check --no-trace` on one file against `python -c pass`. Target: well under 0.5 s.
3. Scale (issue 17: <= 3x): a 50,000-line module and a directory of 2,000 files (bench/_synthetic.py),
   `mpdoctor check --no-trace --format json` in its own process against a process that reads and `ast.parse`s the
   same files, best of 3 interleaved runs. The first row of each input is the default command, whose --jobs is
   the number of usable cores (the row's name says how many: worker processes for the directory; the big file is
   one file, checked in one process either way); then the same with --jobs 1; the user+system CPU of both (the
   workers included); mpdoctor's peak RSS (its own process, not its workers'). mpdoctor's bytecode is compiled
   once beforehand, as in an installed mpdoctor (see `compiled_env`).
4. Break-even of the static worker processes: N small files with two workers forced against --jobs 1 (ratio
   below 1: the workers pay off); mpdoctor.static_workers.MIN_PARALLEL_CHARACTERS comes from these rows.
Prints figures only; never asserts on time.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import contextlib

from _common import ROOT, Measured, best_of, main_for, measure, mib, python_env, row, run_measured
from _synthetic import big_file, many_files

sys.path.insert(0, ROOT)

PARSE_ALL = (
    "import ast, os, sys\n"
    "for root in sys.argv[1:]:\n"
    "    paths = [os.path.join(d, n) for d, _, ns in os.walk(root) for n in ns if n.endswith('.py')] \\\n"
    "        if os.path.isdir(root) else [root]\n"
    "    for p in paths:\n"
    "        ast.parse(open(p, 'rb').read())\n"
)


def default_corpus() -> list[Path]:
    files: list[Path] = []
    for package in ("keras", "tf_keras"):
        spec = importlib.util.find_spec(package)  # locates, does not import
        for location in (spec.submodule_search_locations or []) if spec else []:
            files += sorted(Path(location).rglob("*.py"))
    root = Path(ROOT)
    return files or sorted((root / "tests" / "fixtures").rglob("*.py")) + sorted((root / "examples").rglob("*.py"))


def baseline(files: list[Path]) -> None:
    for path in files:
        with contextlib.suppress(SyntaxError, ValueError):
            ast.parse(path.read_bytes())


def mpdoctor_static(files: list[Path]) -> int:
    from mpdoctor.config import Config
    from mpdoctor.engine import check_source
    from mpdoctor.sources import read_source

    config = Config()
    findings = 0
    for path in files:
        try:
            text = read_source(path)
        except (OSError, UnicodeDecodeError, SyntaxError):
            continue
        diagnostics, _ = check_source(text, str(path), config)
        findings += len(diagnostics)
    return findings


def corpus_rows(quick: bool) -> list[dict]:
    files = default_corpus()
    if quick:
        files = files[:300]
    repeat = 1 if quick else 3
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    mpdoctor_static(files[:20])  # warm imports and rule loading outside the timed region
    base = best_of(repeat, baseline, files)
    ours = best_of(repeat, mpdoctor_static, files)
    findings = mpdoctor_static(files)
    return [
        row(
            "static pass, Keras source corpus",
            ours,
            base,
            target="<= 3",
            note=f"vs read+ast.parse; {len(files):,} files, {lines:,} lines, {findings} findings, "
            f"{len(files) / ours:,.0f} files/s",
        )
    ]


def startup_row(quick: bool) -> dict:
    target = os.path.join(ROOT, "examples", "hub_seed.py")
    repeat = 2 if quick else 5
    python = min(run_measured(["-c", "pass"])[0] for _ in range(repeat))
    check = min(
        run_measured(["-m", "mpdoctor", "check", "--no-trace", "--exit-zero", "-q", target])[0] for _ in range(repeat)
    )
    return row("start-up, check --no-trace one file", check, python, target="< 0.5 s", note="vs python -c pass")


def scale_rows(quick: bool) -> list[dict]:
    """Each input with the default command (--jobs = the usable cores) and with --jobs 1, interleaved with the
    parse baseline, best of 3 (1 with --quick): wall time, and the user+system CPU of the process and its workers."""
    lines, files = (5_000, 200) if quick else (50_000, 2_000)
    from mpdoctor.engine import usable_cores

    repeat = 1 if quick else 3
    cores = usable_cores()  # the default --jobs
    rows = []
    with tempfile.TemporaryDirectory(prefix="mpdoctor-bench-") as tmp:
        env = compiled_env(Path(tmp))
        cases = [
            (f"one {lines:,}-line file", big_file(Path(tmp) / "big_model.py", lines)),
            (f"directory of {files:,} files", many_files(Path(tmp) / "tree", files)),
        ]
        for name, target in cases:
            check = ["-m", "mpdoctor", "check", "--no-trace", "--exit-zero", "--format", "json", "-q", str(target)]
            runs: dict[str, list[Measured]] = {"default": [], "one": [], "parse": []}
            for _ in range(repeat):
                runs["default"].append(measure(check, env=env))
                runs["one"].append(measure([*check, "--jobs", "1"], env=env))
                runs["parse"].append(measure(["-c", PARSE_ALL, str(target)], env=env))
            default, one, parse = (_best(runs[k]) for k in ("default", "one", "parse"))
            cpu = {k: min(m.cpu for m in measured) for k, measured in runs.items()}  # each best on its own
            findings = default.stdout.count(b'"code":') if default.code == 0 else f"exit {default.code}"
            workers = f"workers: {mib(default.children_rss)} at most each" if default.children_rss else "no workers"
            same = "same report" if default.stdout == one.stdout else "REPORTS DIFFER"
            rows += [
                row(
                    f"static, {name} (--jobs {cores})",
                    default.seconds,
                    parse.seconds,
                    target="<= 3",
                    note=f"default jobs; vs a process that ast.parses the same; best of {repeat}; {findings} findings",
                ),
                row("  same, --jobs 1", one.seconds, parse.seconds, note=f"{same} as --jobs {cores}"),
                row(f"  CPU user+sys, --jobs {cores}", cpu["default"], cpu["parse"], note="with its workers"),
                row("  CPU user+sys, --jobs 1", cpu["one"], cpu["parse"]),
                row(
                    f"  peak RSS, {name}",
                    default.rss / 2**20,
                    parse.rss / 2**20,
                    unit="MiB",
                    target="bounded",
                    note=f"mpdoctor's own process, --jobs {cores} ({workers}); --jobs 1: {mib(one.rss)}",
                ),
            ]
    return rows


def break_even_rows(quick: bool) -> list[dict]:
    """Where worker processes start to pay off: N small model files with two workers forced (below the size at
    which mpdoctor.static_workers stays in one process) against --jobs 1, best of 3."""
    force = (
        "import sys, mpdoctor.static_workers as w; w.MIN_PARALLEL_CHARACTERS = 0\n"
        "from mpdoctor.cli import main; sys.exit(main(sys.argv[1:]))\n"
    )
    counts = (10, 40) if quick else (10, 20, 40, 80, 160)
    rows = []
    with tempfile.TemporaryDirectory(prefix="mpdoctor-bench-") as tmp:
        env = compiled_env(Path(tmp))
        for count in counts:
            target = many_files(Path(tmp) / f"tree{count}", count)
            characters = sum(len(p.read_text()) for p in target.rglob("*.py"))
            check = ["check", "--no-trace", "--exit-zero", "--format", "json", "-q", str(target)]
            two, one = [], []
            for _ in range(1 if quick else 3):
                two.append(measure(["-c", force, *check, "--jobs", "2"], env=env))
                one.append(measure(["-c", force, *check, "--jobs", "1"], env=env))
            rows.append(
                row(
                    f"static workers, {count} files",
                    _best(two).seconds,
                    _best(one).seconds,
                    note=f"two workers forced vs --jobs 1; {characters:,} characters",
                )
            )
    return rows


def _best(runs: list[Measured]) -> Measured:
    return min(runs, key=lambda m: m.seconds)


def compiled_env(tmp: Path) -> dict:
    """The environment for measured runs, with mpdoctor's bytecode compiled once (PYTHONPYCACHEPREFIX), as an
    installed mpdoctor has it: PYTHONDONTWRITEBYTECODE (set here) would make every start-up compile mpdoctor's
    sources again, about 0.2 s of CPU."""
    env = python_env(PYTHONPYCACHEPREFIX=str(tmp / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    (tmp / "warm.py").write_text("import keras\n")
    measure(["-m", "mpdoctor", "check", "--no-trace", "--exit-zero", "-q", str(tmp / "warm.py")], env=env)
    return env


def results(quick: bool = False) -> list[dict]:
    return [*corpus_rows(quick), startup_row(quick), *scale_rows(quick), *break_even_rows(quick)]


if __name__ == "__main__":
    raise SystemExit(main_for(results))
