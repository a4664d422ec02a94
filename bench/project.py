"""The static pass over a 2,000-file project with the project analysis (issue 21), against read + `ast.parse` of
the same files measured in the same run (the scale issue's static-speed target: ratio <= 3).

    python bench/project.py [--quick] [--json]

The project (bench/_synthetic.py `project_tree`) looks like a real training repository: each package has an entry
script that sets mixed_float16 behind `--amp` and builds models from its `models/` modules through a registry,
layer modules with a custom layer, and mostly plain helper modules (data, metrics, I/O) that import one another.
Rows: the whole static pass in-process (`check_paths`, project analysis included), the same files checked one by one
without it (`check_source`, today's per-file pass), the project analysis alone, and the peak RSS of `mpdoctor check
--no-trace` in its own process against a process that parses the same files. Prints figures only; never asserts.
"""

from __future__ import annotations

import ast
import contextlib
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import ROOT, best_of, main_for, mib, row, run_measured
from _synthetic import project_tree

sys.path.insert(0, ROOT)

PARSE_ALL = (
    "import ast, os, sys\n"
    "for d, _, ns in os.walk(sys.argv[1]):\n"
    "    for n in ns:\n"
    "        if n.endswith('.py'):\n"
    "            ast.parse(open(os.path.join(d, n), 'rb').read())\n"
)


def parse_all(files: list[Path]) -> None:
    for path in files:
        with contextlib.suppress(SyntaxError, ValueError):
            ast.parse(path.read_bytes())


def whole_pass(tree: Path) -> int:
    from mpdoctor.config import Config
    from mpdoctor.engine import check_paths

    return len(check_paths([tree], Config()).diagnostics)


def file_by_file(files: list[Path]) -> int:
    from mpdoctor.config import Config
    from mpdoctor.engine import check_source
    from mpdoctor.sources import read_source

    config = Config()
    return sum(len(check_source(read_source(p), str(p), config)[0]) for p in files)


def cold() -> None:
    """Forget what earlier runs in this process scanned: every file is read and scanned again."""
    from mpdoctor.project import discovery as project_files

    project_files._CACHE.clear()
    project_files._GRAPHS.clear()


def cold_whole_pass(tree: Path) -> int:
    cold()
    return whole_pass(tree)


def analysis_alone(tree: Path, files: list[Path]):
    from mpdoctor.config import Config
    from mpdoctor.engine import analyse_projects

    cold()
    return analyse_projects([tree], files, Config())


def results(quick: bool = False) -> list[dict]:
    count = 400 if quick else 2_000
    repeat = 1 if quick else 3
    with tempfile.TemporaryDirectory(prefix="mpdoctor-bench-project-") as tmp:
        tree = project_tree(Path(tmp) / "project", count)
        files = sorted(tree.rglob("*.py"))
        lines = sum(p.read_bytes().count(b"\n") for p in files)
        whole_pass(tree)  # warm imports and rule loading outside the timed region
        base = best_of(repeat, parse_all, files)
        ours = best_of(repeat, cold_whole_pass, tree)
        per_file = best_of(repeat, file_by_file, files)
        alone = best_of(repeat, analysis_alone, tree, files)
        projects = analysis_alone(tree, files)
        with_project, without = whole_pass(tree), file_by_file(files)
        seconds, rss, code, _ = run_measured(["-m", "mpdoctor", "check", "--no-trace", "--exit-zero", "-q", str(tree)])
        base_seconds, base_rss, _, _ = run_measured(["-c", PARSE_ALL, str(tree)])
    reached = sum(1 for b in projects.builders if b.across_modules)
    return [
        row(
            f"static, {count:,}-file project",
            ours,
            base,
            target="<= 3",
            note=f"vs read+ast.parse in-process, cold scan; {lines:,} lines; {with_project} findings; "
            f"{reached} builders reached from entry points",
        ),
        row(
            "  same files one by one, no project",
            per_file,
            base,
            note=f"today's per-file pass: {without} findings (the builders' modules run under no policy)",
        ),
        row("  project analysis alone (cold)", alone, base, note="scan every file, parse what the walk visits"),
        row(
            f"  peak RSS, check --no-trace {count:,} files",
            rss / 2**20,
            base_rss / 2**20,
            unit="MiB",
            target="bounded",
            note=f"{mib(rss)} vs {mib(base_rss)}; {seconds:.2f} s vs {base_seconds:.2f} s with start-up"
            + ("" if code == 0 else f"; exit {code}"),
        ),
    ]


if __name__ == "__main__":
    raise SystemExit(main_for(results))
