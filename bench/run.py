"""Every benchmark in one table: each figure beside its baseline measured in the same run, the ratio, the target.

    python bench/run.py                 # everything (several minutes: ResNet50 traces, a 1 GiB checkpoint...)
    python bench/run.py --quick         # smaller inputs, one repeat
    python bench/run.py --only static   # one module (repeatable; by file name without .py)
    python bench/run.py --json          # the rows as JSON

A bench module is any `bench/*.py` except this one and private helpers (`_*.py`) that defines
`results(quick: bool = False) -> list[dict]`; rows have the keys name, measured, baseline, ratio, target, unit,
note (bench/_common.py). Prints figures only; the targets are the issues' and are never asserted.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import format_table, row  # noqa: E402 - after the sys.path entry it needs


def bench_modules() -> dict[str, Path]:
    return {
        path.stem: path for path in sorted(HERE.glob("*.py")) if path.name != "run.py" and not path.name.startswith("_")
    }


def load(name: str, path: Path):
    # A private module name: `trace` and `inspect` would shadow the standard library's.
    spec = importlib.util.spec_from_file_location(f"mpdoctor_bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = ""
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            memory = f", {int(handle.readline().split()[1]) / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return (
        f"{os.cpu_count()} CPUs ({cpu}){memory}, {platform.system()} {platform.release()}, Python "
        f"{platform.python_version()}"
    )


def main(argv: list[str] | None = None) -> int:
    modules = bench_modules()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, one repeat")
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(modules),
        metavar="NAME",
        help=f"run only this module (one of: {', '.join(sorted(modules))}; repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rows: list[dict] = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for name in args.only or sorted(modules):
        print(f"running bench/{name}.py ...", file=sys.stderr, flush=True)
        try:
            module = load(name, modules[name])
            if not hasattr(module, "results"):
                continue  # not a bench module
            rows += module.results(quick=args.quick)
        except Exception as exc:
            traceback.print_exc()
            rows.append(row(f"{name}: failed", None, None, note=f"{type(exc).__name__}: {exc}"))
    if args.json:
        print(json.dumps({"date": started, "machine": machine(), "quick": args.quick, "rows": rows}, indent=2))
    else:
        print(f"mpdoctor benchmarks, {started}{' (--quick)' if args.quick else ''}; {machine()}")
        print(format_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
