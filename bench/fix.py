"""Cost of `check --fix` planning against `check` on the same files, measured in the same run.

    python bench/fix.py [--repeat 3] [--copies 20]

Corpus: the autofix fixture inputs (tests/fixes/*/*.in.py), each repeated `--copies` times in one module-sized file
so that the fix rounds (apply, parse, re-check) run on realistic sizes. Static only (no trace: a verified fix adds one
trace of the fixed file, as long as `check` itself). Prints figures only; never asserts on time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def corpus() -> list[tuple[str, str]]:
    return [
        (str(p.relative_to(ROOT)), p.read_text(encoding="utf-8"))
        for p in sorted((ROOT / "tests" / "fixes").glob("MP*/*.in.py"))
    ]


def check_all(files, config) -> int:
    from mpdoctor.engine import check_source

    return sum(len(check_source(text, shown, config)[0]) for shown, text in files)


def fix_all(files, config) -> int:
    from mpdoctor.engine import TraceOptions, check_source
    from mpdoctor.fix.files import fix_file

    applied = 0
    for shown, text in files:
        diagnostics, _ = check_source(text, shown, config)
        result = fix_file(Path(shown), shown, text, diagnostics, config, TraceOptions(enabled=False), unsafe=True)
        applied += len(result.applied)
    return applied


def best_of(repeat: int, fn, *args) -> tuple[float, int]:
    best, value = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn(*args)
        best = min(best, time.perf_counter() - start)
    return best, value


def results(quick: bool = False) -> list[dict]:
    """`check --fix` planning (unsafe fixes included, static) beside `check` on the same files."""
    from _common import row

    from mpdoctor.config import Config

    config = Config()
    copies = 2 if quick else 10
    files = [(shown, "\n".join([text] * copies)) for shown, text in corpus()]
    lines = sum(text.count("\n") for _, text in files)
    repeat = 1 if quick else 3
    check_time, findings = best_of(repeat, check_all, files, config)
    fix_time, applied = best_of(repeat, fix_all, files, config)
    return [
        row(
            f"fix planning, {len(files)} files x{copies} ({lines} lines)",
            fix_time,
            check_time,
            note=f"baseline: check of the same files ({findings} findings); {applied} fixes applied; static, "
            f"no re-trace (a verified fix adds one trace per round)",
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--copies", type=int, default=1, help="concatenate each input this many times")
    args = parser.parse_args()
    from mpdoctor.config import Config

    config = Config()
    files = [(shown, "\n".join([text] * args.copies)) for shown, text in corpus()]
    lines = sum(text.count("\n") for _, text in files)
    check_time, findings = best_of(args.repeat, check_all, files, config)
    fix_time, applied = best_of(args.repeat, fix_all, files, config)
    print(f"{len(files)} files, {lines} lines, {findings} findings, {applied} fixes applied (unsafe included)")
    print(f"check:            {check_time * 1000:8.1f} ms")
    print(f"check + fix plan: {fix_time * 1000:8.1f} ms  (ratio {fix_time / check_time:.1f}x)")


if __name__ == "__main__":
    main()
