"""Trace-pass cost, measured against baselines in the same run (issue 3 targets; never asserted in tests).

    python bench/trace.py [--repeat 3] [--layers 100,1000,10000]

1. Overhead: `mpdoctor check --trace` on a script that builds ResNet50 (weights=None) against plain `python`
   importing the same script in the same environment. Target: ratio <= 1.5.
2. Graph scaling: graph + dtype propagation + trace rules on synthetic Sequential models of N Dense layers, inside
   one process, beside the model's own build time. Target: linear, 10,000 layers in under 5 s beyond the build.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESNET = textwrap.dedent("""\
    import tensorflow as tf

    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    model = tf.keras.applications.ResNet50(weights=None)
    """)


def timed(cmd, env) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def overhead(repeat: int) -> tuple[float, float]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "resnet_model.py"
        script.write_text(RESNET)
        plain = min(timed([sys.executable, "-c", f"import runpy; runpy.run_path({str(script)!r})"], env)
                    for _ in range(repeat))
        traced = min(timed([sys.executable, "-m", "mpdoctor", "check", "--trace", "--exit-zero", "-q", str(script)],
                           env) for _ in range(repeat))
    return plain, traced


SCALING = textwrap.dedent("""\
    import sys, threading, time, os
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import keras
    from mpdoctor.trace.graph import model_graph
    from mpdoctor.trace.checks import run_checks
    from mpdoctor.trace.context import TraceContext
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

    # Keras recurses once per layer while building a deep model: a big stack and recursion limit.
    sys.setrecursionlimit(200000)
    threading.stack_size(512 * 1024 * 1024)
    worker = threading.Thread(target=measure)
    worker.start()
    worker.join()
    """)


def scaling(sizes: str) -> list[tuple[int, float, float]]:
    result = subprocess.run([sys.executable, "-c", SCALING, sizes], capture_output=True, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    rows = []
    for line in result.stdout.splitlines():
        n, build, analysis = line.split()
        rows.append((int(n), float(build), float(analysis)))
    if not rows:
        print(result.stderr[-2000:], file=sys.stderr)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--layers", default="100,1000,10000")
    args = parser.parse_args()
    plain, traced = overhead(args.repeat)
    print(f"{'measure':<44}{'mpdoctor':>10}{'baseline':>10}{'ratio':>8}{'target':>10}")
    print(f"{'trace ResNet50 script (s) vs python import':<44}{traced:>10.2f}{plain:>10.2f}{traced / plain:>8.2f}"
          f"{'<= 1.5':>10}")
    for n, build, analysis in scaling(args.layers):
        print(f"{f'graph+rules, {n} layers (s) vs build':<44}{analysis:>10.3f}{build:>10.3f}"
              f"{analysis / build:>8.2f}{'< 5 s' if n >= 10000 else '':>10}   {1e6 * analysis / n:.0f} us/layer")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
