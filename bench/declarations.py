"""Reading what a project declares scales linearly (issue 32, reproduction 11): pyproject.toml dependencies and a
Dockerfile's continued lines, each at n and 4n, against 4 x the time at n (ratio 1 = linear; a quadratic reader is
near 4). Before the fix, 20,000 dependencies took 168 s and 150,000 continued lines 133 s.

    python bench/declarations.py [--quick] [--json]

Prints figures only; never asserts.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import ROOT, best_of, main_for, row

sys.path.insert(0, ROOT)


def _pyproject(directory: Path, n: int) -> Path:
    deps = ",\n".join(f'  "tensorflow-addon{i}>=1"' for i in range(n))
    path = directory / "pyproject.toml"
    path.write_text(f'[project]\nname = "p"\ndependencies = [\n{deps},\n  "tensorflow==2.15"\n]\n')
    return path


def _dockerfile(directory: Path, n: int) -> Path:
    path = directory / "Dockerfile"
    path.write_text("FROM python:3.11\nRUN pip install \\\n" + "  numpy==1.0 \\\n" * n + "  tensorflow==2.15\n")
    return path


def results(quick: bool = False) -> list[dict]:
    from mpdoctor.project.declared import declarations_in

    repeat = 1 if quick else 3
    rows = []
    cases = (("pyproject.toml dependencies", _pyproject, 5_000 if quick else 20_000),)
    cases += (("Dockerfile continued lines", _dockerfile, 25_000 if quick else 100_000),)
    for name, write, n in cases:
        times = {}
        for size in (n, 4 * n):
            with tempfile.TemporaryDirectory() as folder:
                write(Path(folder), size)
                times[size] = best_of(repeat, declarations_in, Path(folder))
        rows.append(
            row(
                f"{name}, {4 * n:,} vs 4 x {n:,}",
                times[4 * n],
                4 * times[n],
                target="~1 (linear)",
                note=f"{times[n]:.3f} s for {n:,}; {times[4 * n]:.3f} s for {4 * n:,}",
            )
        )
    return rows


if __name__ == "__main__":
    raise SystemExit(main_for(results))
