"""Cost of the numerics pass (issue 5), measured against a baseline in the same run (never asserted in tests).

    python bench/numerics.py [--quick]

For ResNet50 and MobileNetV2 (`weights=None`, `mixed_float16`, Keras 3, batch 2 of 224x224x3 in [0, 1)): the time
of a numerics `Session` (the instrumented float16 call, which in the trace replaces the plain call on the sample
batch, then the instrumented float32 reference, per-layer statistics, user-layer scans) against one plain float32
plus one plain float16 forward pass of the same model, in the same process after a warm-up call. Target: ratio
<= 3. Also printed: the peak RSS of the process before and after the numerics pass, and the
largest per-layer relative error float16 vs float32 over the layers whose float32 output reaches float16's normal
range (the figure MP405 judges and its default threshold of 0.05 must stay above).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 3.0

MEASURE = textwrap.dedent("""\
    import json, os, resource, sys, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import keras
    import numpy as np
    from mpdoctor.facts.trace_request import NumericsRequest
    from mpdoctor.trace.child import numerics
    from mpdoctor.trace.child.graph import model_graph

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = getattr(keras.applications, sys.argv[1])(weights=None)
    graph = model_graph(model, {}, probe=False)
    batch = numerics.sample_inputs(model)
    model(batch, training=False)  # warm-up: kernel selection and first-call setup are not what we measure

    def forward():
        start = time.perf_counter()
        model(batch, training=False)
        return time.perf_counter() - start

    repeat = int(sys.argv[2])
    float16 = min(forward() for _ in range(repeat))
    saved = numerics._swap_to_float32(numerics._node_layers(model))
    model(batch, training=False)
    float32 = min(forward() for _ in range(repeat))
    numerics._restore_policies(saved)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        session = numerics.Session(model, NumericsRequest(), "/nonexistent.py")
        session.call()  # in the trace this IS the model's one call on its sample batch
        record = session.finish(graph)
        times.append(time.perf_counter() - start)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    errors = [row.relative_error for row in record.layers if row.relative_error is not None]
    normal = [row.relative_error for row in record.layers if row.relative_error is not None
              and (row.max_abs_reference or 0) >= 6.103515625e-05]  # what MP405 judges
    print(json.dumps({"numerics": min(times), "float16": float16, "float32": float32, "rss_before": rss_before,
                      "rss_after": rss_after, "layers": len(record.layers), "skipped": record.skipped,
                      "finite": all(row.finite for row in record.layers),
                      "max_error": max(errors), "median_error": float(np.median(errors)),
                      "max_normal_error": max(normal), "underflow_layers": len(errors) - len(normal),
                      "output_error": errors[-1]}))
    """)


def measure(name: str, repeat: int) -> dict:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        TF_USE_LEGACY_KERAS="0",
        TF_CPP_MIN_LOG_LEVEL="3",
    )
    result = subprocess.run(
        [sys.executable, "-c", MEASURE, name, str(repeat)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"{name}: measurement failed: {result.stderr[-1500:]}")
    return json.loads(lines[-1])


def results(quick: bool = False) -> list[dict]:
    rows = []
    for name in ("ResNet50", "MobileNetV2"):
        m = measure(name, 1 if quick else 3)
        baseline = m["float16"] + m["float32"]
        rows.append(
            {
                "name": f"numerics {name} (s) vs float32 + float16 forward",
                "measured": m["numerics"],
                "baseline": baseline,
                "ratio": m["numerics"] / baseline,
                "target": f"<= {TARGET:g}",
                "unit": "s",
                "note": f"peak RSS {m['rss_before']:.0f} -> {m['rss_after']:.0f} MiB; {m['layers']} layers; "
                f"relative error max {m['max_normal_error']:.2e} over layers in float16's normal range "
                f"(MP405 threshold 5e-02), {m['underflow_layers']} layers below it (max "
                f"{m['max_error']:.2e}), median {m['median_error']:.2e}; all finite: {m['finite']}",
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repetition instead of three")
    args = parser.parse_args()
    print(f"{'measure':<52}{'mpdoctor':>10}{'baseline':>10}{'ratio':>8}{'target':>8}")
    for row in results(args.quick):
        print(
            f"{row['name']:<52}{row['measured']:>10.3f}{row['baseline']:>10.3f}{row['ratio']:>8.2f}{row['target']:>8}"
        )
        print(f"    {row['note']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
