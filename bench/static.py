"""Static-pass throughput against a baseline measured in the same run: reading + `ast.parse` of the same files.

    python bench/static.py [--repeat 3] [--limit N] [PATH ...]

Corpus (default): the .py files of the installed `keras` and `tf_keras` packages (real Keras source, including
keras/src/applications), falling back to this repository's fixtures and examples. Also times the start-up of
`mpdoctor check --no-trace` on one file against `python -c pass`. Targets (issue 2): ratio <= 3, start-up well
under half a second. Prints figures only; never asserts on time.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def default_corpus() -> list[Path]:
    files: list[Path] = []
    for package in ("keras", "tf_keras"):
        spec = importlib.util.find_spec(package)  # locates, does not import
        for location in (spec.submodule_search_locations or []) if spec else []:
            files += sorted(Path(location).rglob("*.py"))
    return files or sorted((ROOT / "tests" / "fixtures").rglob("*.py")) + sorted((ROOT / "examples").rglob("*.py"))


def baseline(files: list[Path]) -> None:
    for path in files:
        try:
            ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            pass


def mpdoctor_static(files: list[Path]) -> int:
    from mpdoctor.config import Config
    from mpdoctor.engine import check_source, read_source

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


def best_of(repeat: int, fn, *args) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return min(times)


def startup(repeat: int) -> tuple[float, float]:
    target = ROOT / "examples" / "hub_seed.py"

    def run(cmd):
        return min(_timed(cmd) for _ in range(repeat))

    return run([sys.executable, "-c", "pass"]), run([sys.executable, "-m", "mpdoctor", "check", "--no-trace",
                                                     "--exit-zero", "-q", str(target)])


def _timed(cmd) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, capture_output=True, cwd=ROOT)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--limit", type=int, default=0, help="use only the first N files")
    args = parser.parse_args()
    files = [p for root in args.paths for p in (sorted(root.rglob("*.py")) if root.is_dir() else [root])] \
        or default_corpus()
    if args.limit:
        files = files[: args.limit]
    lines = sum(p.read_bytes().count(b"\n") for p in files)

    mpdoctor_static(files[:20])  # warm imports and rule loading outside the timed region
    base = best_of(args.repeat, baseline, files)
    ours = best_of(args.repeat, mpdoctor_static, files)
    findings = mpdoctor_static(files)
    python_start, check_start = startup(max(args.repeat, 5))

    print(f"corpus: {len(files)} files, {lines} lines")
    print(f"{'measure':<34}{'mpdoctor':>12}{'baseline':>12}{'ratio':>8}{'target':>10}")
    print(f"{'static pass (s), read+ast.parse':<34}{ours:>12.3f}{base:>12.3f}{ours / base:>8.2f}{'<= 3':>10}")
    print(f"{'files/s':<34}{len(files) / ours:>12.0f}{len(files) / base:>12.0f}")
    print(f"{'start-up one file (s), python -c':<34}{check_start:>12.3f}{python_start:>12.3f}"
          f"{check_start / python_start:>8.2f}{'< 0.5 s':>10}")
    print(f"findings on the corpus: {findings}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
