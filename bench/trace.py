"""Trace-pass cost, measured against baselines in the same run (issue 3 targets; never asserted in tests).

    python bench/trace.py [--quick] [--json]

1. Overhead: `mpdoctor check --trace --no-numerics` on a script that builds ResNet50 (weights=None) against plain
   `python` importing the same script in the same environment (target: ratio <= 1.5), and the default check with
   numerics, whose two extra forward passes issue 5 budgets separately (bench/numerics.py).
2. Graph scaling: graph + dtype propagation + trace rules on synthetic Sequential models of N Dense layers, inside
   one process, beside the model's own build time. Target: linear, 10,000 layers in under 5 s beyond the build.
   The peak RSS of that process (all sizes built in turn) is in the last row's note.
--quick: one repeat, 100 and 1,000 layers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import ROOT, main_for, row

RESNET = textwrap.dedent("""\
    import tensorflow as tf

    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    model = tf.keras.applications.ResNet50(weights=None)
    """)


def timed(cmd, env) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def overhead(repeat: int) -> tuple[float, float, float]:
    """(plain python, check --trace, check --trace --no-numerics) on the ResNet50 script."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "resnet_model.py"
        script.write_text(RESNET)
        plain = min(
            timed([sys.executable, "-c", f"import runpy; runpy.run_path({str(script)!r})"], env) for _ in range(repeat)
        )
        check = [sys.executable, "-m", "mpdoctor", "check", "--trace", "--no-cache", "--exit-zero", "-q", str(script)]
        traced = min(timed(check, env) for _ in range(repeat))
        without_numerics = min(timed(check + ["--no-numerics"], env) for _ in range(repeat))
    return plain, traced, without_numerics


SCALING = textwrap.dedent("""\
    import sys, threading, time, os
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import keras
    from mpdoctor.trace.child.graph import model_graph
    from mpdoctor.trace.checks import run_checks
    from mpdoctor.trace_context import TraceContext
    from mpdoctor.config import Config

    def measure():
        keras.mixed_precision.set_global_policy("mixed_float16")
        for n in [int(v) for v in sys.argv[1].split(",")]:
            start = time.perf_counter()
            layers = [keras.Input((8,))] + [keras.layers.Dense(8) for _ in range(n)]
            model = keras.Sequential(layers)
            build = time.perf_counter() - start
            start = time.perf_counter()
            graph = model_graph(model, {})
            facts = {"layers": {}, "models": [{"name": "m", "graph": graph}], "policy_events": [],
                     "environment": {"gpus": []}, "savedmodel_loads": [], "exports": [], "restores": []}
            run_checks(facts, TraceContext("m.py", "m.py", "", None), Config())
            analysis = time.perf_counter() - start
            print(n, build, analysis, flush=True)
        with open("/proc/self/status") as status:
            print("peak", next(line.split()[1] for line in status if line.startswith("VmHWM:")), flush=True)

    # Keras recurses once per layer while building a deep model: a big stack and recursion limit.
    sys.setrecursionlimit(200000)
    threading.stack_size(512 * 1024 * 1024)
    worker = threading.Thread(target=measure)
    worker.start()
    worker.join()
    """)


def scaling(sizes: str) -> tuple[list[tuple[int, float, float]], int | None]:
    result = subprocess.run(
        [sys.executable, "-c", SCALING, sizes],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    rows, peak = [], None
    for line in result.stdout.splitlines():
        if line.startswith("peak "):
            peak = int(line.split()[1]) * 1024
            continue
        n, build, analysis = line.split()
        rows.append((int(n), float(build), float(analysis)))
    if not rows:
        print(result.stderr[-2000:], file=sys.stderr)
    return rows, peak


def results(quick: bool = False) -> list[dict]:
    plain, traced, without_numerics = overhead(1 if quick else 3)
    rows = [
        row(
            "trace, ResNet50 script, --no-numerics",
            without_numerics,
            plain,
            target="<= 1.5",
            note="mpdoctor check --trace vs plain python importing the script (which never calls the model)",
        ),
        row(
            "trace, ResNet50 script, with numerics",
            traced,
            plain,
            note="default: adds the float32 reference pass and per-layer statistics (bench/numerics.py)",
        ),
    ]
    sizes, peak = scaling("100,1000" if quick else "100,1000,10000")
    for n, build, analysis in sizes:
        rows.append(
            row(
                f"graph+trace rules, {n:,} layers",
                analysis,
                build,
                target="< 5 s" if n >= 10000 else "",
                note=f"vs the model's build; {1e6 * analysis / n:.0f} us/layer",
            )
        )
    if sizes and peak:
        rows[-1]["note"] += f"; peak RSS {peak / 2**20:,.0f} MiB (whole process)"
    return rows


if __name__ == "__main__":
    raise SystemExit(main_for(results))
