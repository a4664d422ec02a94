"""Shared by the bench modules: result rows, timing, per-child peak RSS, and the one table every script prints.

A bench module exposes `results(quick: bool = False) -> list[dict]`; each row has the keys of `row()`. `run.py`
collects every module's rows into one table; `python bench/x.py` prints that module's rows alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
COLUMNS = ("name", "measured", "baseline", "ratio", "target", "unit", "note")


def row(
    name: str, measured: float | None, baseline: float | None, *, target: str = "", unit: str = "s", note: str = ""
) -> dict:
    """One figure beside its baseline measured in the same run; ratio = measured / baseline."""
    ratio = measured / baseline if measured is not None and baseline else None
    return {
        "name": name,
        "measured": measured,
        "baseline": baseline,
        "ratio": ratio,
        "target": target,
        "unit": unit,
        "note": note,
    }


def best_of(repeat: int, fn, *args) -> float:
    times = []
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return min(times)


# Runs a Python program (`-m module` or `-c code`, then its arguments) and writes its own peak RSS (VmHWM: reset at
# exec, unlike wait4's ru_maxrss, which keeps the forking parent's) to the file named by MPDOCTOR_BENCH_RSS, then
# the largest peak of the children it forked without exec and waited for (its worker processes; their pages still
# shared with it count too), 0 without any.
_RSS_WRAPPER = """
import atexit, os, resource, runpy, sys
def _peak():
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    with open(os.environ["MPDOCTOR_BENCH_RSS"], "w") as out:
        out.write(f"{peak} {children}")
atexit.register(_peak)
mode, target, *sys.argv[1:] = sys.argv[1:]
if mode == "-m":
    sys.argv[0] = target
    runpy.run_module(target, run_name="__main__", alter_sys=True)
else:
    sys.argv[0] = "-c"
    exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
"""


@dataclass(frozen=True)
class Measured:
    seconds: float  # wall time
    cpu: float  # user + system CPU seconds of the process and every descendant it waited for (its workers)
    rss: int  # its own peak RSS in bytes
    children_rss: int  # the largest peak RSS of its worker processes (forked, not exec'd), 0 without any
    code: int
    stdout: bytes


def measure(args: list[str], *, cwd: str | None = None, env: dict | None = None) -> Measured:
    """Run `python ARGS` (`-m module ...` or `-c code ...`) and measure it. The wrapper's own start-up is in both
    the figure and its baseline."""
    import resource
    import tempfile

    with tempfile.NamedTemporaryFile(prefix="mpdoctor-bench-rss-") as rss_file:
        env = dict(env or python_env(), MPDOCTOR_BENCH_RSS=rss_file.name)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        result = subprocess.run(
            [PYTHON, "-c", _RSS_WRAPPER, *args],
            check=False,
            cwd=cwd or ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(rss_file.name) as handle:
            peak, children = (int(n) for n in (handle.read() or "0 0").split())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Measured(seconds, cpu, peak, children, result.returncode, result.stdout)


def run_measured(args: list[str], *, cwd: str | None = None, env: dict | None = None) -> tuple[float, int, int, bytes]:
    """Run `python ARGS` (`-m module ...` or `-c code ...`); (wall seconds, its peak RSS in bytes, exit code,
    stdout). The wrapper's own start-up is in both the figure and its baseline."""
    measured = measure(args, cwd=cwd, env=env)
    return measured.seconds, measured.rss, measured.code, measured.stdout


def mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f} MiB"


def _cell(value, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "MiB":
        return f"{value:,.0f}"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def format_table(rows: list[dict]) -> str:
    header = ("benchmark", "mpdoctor", "baseline", "ratio", "target", "unit", "note")
    lines = [
        (
            r["name"],
            _cell(r["measured"], r["unit"]),
            _cell(r["baseline"], r["unit"]),
            "-" if r["ratio"] is None else f"{r['ratio']:.2f}",
            r["target"] or "",
            r["unit"],
            r["note"],
        )
        for r in rows
    ]
    widths = [max(len(str(line[i])) for line in [header, *lines]) for i in range(len(header))]
    right = {1, 2, 3}
    out = []
    for line in [header, *lines]:
        cells = [str(c).rjust(widths[i]) if i in right else str(c).ljust(widths[i]) for i, c in enumerate(line)]
        out.append("  ".join(cells).rstrip())
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def main_for(results, argv: list[str] | None = None) -> int:
    """`python bench/x.py [--quick] [--json]`: that module's rows as the same table run.py prints."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a short run (smaller inputs, one repeat)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rows = results(quick=args.quick)
    print(json.dumps(rows, indent=2) if args.json else format_table(rows))
    return 0


def python_env(**extra: str) -> dict:
    """The environment for bench children: this checkout's mpdoctor first on the path, TensorFlow quiet."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    return env
