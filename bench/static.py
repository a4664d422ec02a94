"""Static-pass throughput against baselines measured in the same run (issue 2 and issue 8 targets).

    python bench/static.py [--quick] [--json]

1. Corpus: the .py files of the installed `keras` and `tf_keras` packages (real Keras source), falling back to this
   repository's fixtures and examples; the static pass in-process against reading + `ast.parse` of the same files.
   Target: ratio <= 3.
2. Start-up of `mpdoctor check --no-trace` on one file against `python -c pass`. Target: well under 0.5 s.
3. Scale: a 50,000-line module and a directory of 2,000 files (bench/_synthetic.py), `mpdoctor check --no-trace`
   in its own process against a process that reads and `ast.parse`s the same files; time and peak RSS.
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

from _common import ROOT, best_of, main_for, mib, row, run_measured
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
    lines, files = (5_000, 200) if quick else (50_000, 2_000)
    rows = []
    with tempfile.TemporaryDirectory(prefix="mpdoctor-bench-") as tmp:
        cases = [
            (f"static, one {lines:,}-line file", big_file(Path(tmp) / "big_model.py", lines)),
            (f"static, directory of {files:,} files", many_files(Path(tmp) / "tree", files)),
        ]
        for name, target in cases:
            seconds, rss, code, out = run_measured(
                ["-m", "mpdoctor", "check", "--no-trace", "--exit-zero", "--format", "json", "-q", str(target)]
            )
            base_seconds, base_rss, _, _ = run_measured(["-c", PARSE_ALL, str(target)])
            findings = out.count(b'"code":') if code == 0 else f"exit {code}"
            rows.append(
                row(
                    name,
                    seconds,
                    base_seconds,
                    target="finishes",
                    note=f"vs a process that ast.parses the same; {findings} findings",
                )
            )
            rows.append(
                row(
                    f"  peak RSS, {name.split(', ', 1)[1]}",
                    rss / 2**20,
                    base_rss / 2**20,
                    unit="MiB",
                    target="bounded",
                    note=f"{mib(rss)} vs {mib(base_rss)}",
                )
            )
    return rows


def results(quick: bool = False) -> list[dict]:
    return [*corpus_rows(quick), startup_row(quick), *scale_rows(quick)]


if __name__ == "__main__":
    raise SystemExit(main_for(results))
