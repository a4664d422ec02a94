"""Benchmark of the checkpoint range audit and converter (mpdoctor/artifacts/range_audit.py, convert.py).

Writes a TF2 object-based checkpoint of about --size-mb MiB (default 1024: a transformer-like stack of variables of
mixed sizes, from 2 KiB layer-norm vectors to a large embedding, plus a few outliers), then measures, each in its own
child process so that peak RSS is the child's own (VmHWM from /proc/self/status; TensorFlow's import is outside
the timed section but inside the RSS):

- baseline: TF's CheckpointReader reading every tensor (`get_tensor` for each key), nothing else;
- audit: `audit_checkpoint(prefix, "float16")` (index, object graph, every float tensor streamed from its shard
  in 1 MiB chunks and audited), and the same with `verify_checksums=True` (whole tensors through TF's reader, which
  checks each tensor's CRC32C);
- convert: `convert_checkpoint(prefix, out, "float16")` (read, audit, cast, write, read back and verify).

Baseline and audit alternate --repeat times on a warm page cache; the best time of each is reported. Targets
(issue 4): audit time <= 1.3x the baseline's; audit peak RSS < 2x the largest tensor + the baseline's peak RSS.

    python bench/checkpoint.py                  # ~1 GiB
    python bench/checkpoint.py --size-mb 256    # quicker
    python bench/checkpoint.py --json           # the rows of the bench table (run.py: 1 GiB; --quick: 64 MiB)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import ROOT, row

PRELUDE = textwrap.dedent("""
    import json, os, sys, time
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, {root!r})

    def peak_rss():
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def report(**fields):
        fields["peak_rss"] = peak_rss()
        print("RESULT " + json.dumps(fields))
""")

WRITE = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    prefix, size_mb = sys.argv[1], float(sys.argv[2])
    target = int(size_mb * 2**20)
    d = 512 if size_mb < 512 else 1024
    rng = np.random.default_rng(0)
    shapes = [("embedding", (max(1, target // 16 // (4 * d)), d))]
    block = 0
    total = shapes[0][1][0] * d * 4
    while total < target:
        for name, shape in (("q", (d, d)), ("k", (d, d)), ("v", (d, d)), ("o", (d, d)), ("up", (d, 4 * d)),
                            ("down", (4 * d, d))):
            shapes.append((f"block{block}/{name}/kernel", shape))
            shapes.append((f"block{block}/{name}/bias", (shape[1],)))
        for name in ("ln1", "ln2"):
            shapes.append((f"block{block}/{name}/gamma", (d,)))
            shapes.append((f"block{block}/{name}/beta", (d,)))
        total = sum(int(np.prod(s)) * 4 for _, s in shapes)
        block += 1
    root = tf.Module()
    variables = {}
    started = time.perf_counter()
    for i, (name, shape) in enumerate(shapes):
        value = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
        if i % 50 == 7:
            value.reshape(-1)[:3] = (1e5, -7e4, 1e-9)  # a few values out of float16's range
        variables[name.replace("/", "_")] = tf.Variable(value, name=name)
    checkpoint = tf.train.Checkpoint(model=tf.Module(), step=tf.Variable(1000, dtype=tf.int64))
    for key, variable in variables.items():
        setattr(checkpoint.model, key, variable)
    path = checkpoint.write(prefix)
    report(path=path, variables=len(shapes) + 1, bytes=total,
           largest=max(int(np.prod(s)) * 4 for _, s in shapes), seconds=time.perf_counter() - started)
""")

BASELINE = textwrap.dedent("""
    import tensorflow as tf
    prefix = sys.argv[1]
    started = time.perf_counter()
    reader = tf.train.load_checkpoint(prefix)
    read = 0
    for key in sorted(reader.get_variable_to_dtype_map()):
        value = reader.get_tensor(key)
        read += getattr(value, "nbytes", 0)
        del value
    report(seconds=time.perf_counter() - started, bytes=read)
""")

AUDIT = textwrap.dedent("""
    from mpdoctor.artifacts.backends import load_tensorflow
    from mpdoctor.artifacts.range_audit import audit_checkpoint
    load_tensorflow()
    prefix = sys.argv[1]
    started = time.perf_counter()
    audit = audit_checkpoint(prefix, "float16", verify_checksums=sys.argv[2] == "verify")
    report(seconds=time.perf_counter() - started, bytes=audit.bytes_read, verdict=audit.verdict)
""")

CONVERT = textwrap.dedent("""
    from mpdoctor.artifacts.backends import eager_tensorflow
    from mpdoctor.artifacts.convert import convert_checkpoint
    eager_tensorflow()
    prefix, out = sys.argv[1], sys.argv[2]
    started = time.perf_counter()
    result = convert_checkpoint(prefix, out, "float16")
    report(seconds=time.perf_counter() - started, bytes=result.bytes_in, bytes_out=result.bytes_out,
           cast=len(result.cast))
""")


def child(body: str, *args: str) -> dict:
    code = PRELUDE.format(root=ROOT) + body
    result = subprocess.run([sys.executable, "-c", code, *args], check=False, capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        sys.exit(f"bench child failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def warm(prefix: str) -> None:
    directory = os.path.dirname(prefix)
    for name in os.listdir(directory):
        if name.startswith(os.path.basename(prefix) + "."):
            with open(os.path.join(directory, name), "rb") as handle:
                while handle.read(16 << 20):
                    pass


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def measure(size_mb: float, repeat: int, convert: bool, work: str) -> dict:
    """Write the checkpoint in `work`, then time the baseline and the audits `repeat` times each (and convert)."""
    prefix = os.path.join(work, "ckpt")
    made = child(WRITE, prefix, str(size_mb))
    warm(prefix)
    runs: dict[str, list[dict]] = {"baseline": [], "audit": [], "verify": []}
    for _ in range(max(1, repeat)):
        runs["baseline"].append(child(BASELINE, prefix))
        runs["audit"].append(child(AUDIT, prefix, "stream"))
        runs["verify"].append(child(AUDIT, prefix, "verify"))
    best = {name: min(results, key=lambda r: r["seconds"]) for name, results in runs.items()}
    converted = None
    if convert:
        out = os.path.join(work, "converted", "ckpt16")
        os.makedirs(os.path.dirname(out))
        converted = child(CONVERT, prefix, out)
    return {
        "made": made,
        "runs": runs,
        "best": best,
        "convert": converted,
        "budget": 2 * made["largest"] + best["baseline"]["peak_rss"],
        "audit_rss": max(r["peak_rss"] for r in runs["audit"]),
    }


def results(quick: bool = False) -> list[dict]:
    size = 64 if quick else 1024
    with tempfile.TemporaryDirectory(prefix="mpdoctor-bench-") as work:
        m = measure(size, 1 if quick else 3, True, work)
    best, base = m["best"], m["best"]["baseline"]["seconds"]
    what = f"{mib(m['made']['bytes'])} TF2 checkpoint, {m['made']['variables']} variables"
    rows = [
        row(
            "checkpoint audit float16 (streamed)",
            best["audit"]["seconds"],
            base,
            target="<= 1.3",
            note=f"vs TF CheckpointReader reading every tensor; {what}",
        ),
        row("checkpoint audit, verify_checksums", best["verify"]["seconds"], base, note="same baseline"),
    ]
    if m["convert"]:
        rows.append(
            row(
                "convert-checkpoint to float16 + verify",
                m["convert"]["seconds"],
                base,
                note="same baseline (the conversion reads, casts, writes and reads back)",
            )
        )
    base_rss = best["baseline"]["peak_rss"] / 2**20
    rows.append(
        row(
            "  peak RSS, checkpoint audit",
            m["audit_rss"] / 2**20,
            base_rss,
            unit="MiB",
            target=f"< {m['budget'] / 2**20:,.0f}",
            note=f"target: 2 x largest tensor ({mib(m['made']['largest'])}) + the baseline's {base_rss:,.0f}",
        )
    )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=1024, help="checkpoint size in MiB (default 1024)")
    parser.add_argument("--repeat", type=int, default=3, help="baseline/audit runs each, best kept (default 3)")
    parser.add_argument("--dir", help="work directory (default: a temporary directory, removed afterwards)")
    parser.add_argument("--no-convert", action="store_true", help="skip the conversion measurement")
    parser.add_argument("--json", action="store_true", help="print the rows of the bench table (run.py) as JSON")
    args = parser.parse_args()
    if args.json:
        print(json.dumps(results(quick=args.size_mb < 1024), indent=2))
        return 0

    work = args.dir or tempfile.mkdtemp(prefix="mpdoctor-bench-")
    os.makedirs(work, exist_ok=True)
    try:
        m = measure(args.size_mb, args.repeat, not args.no_convert, work)
        made, runs, best = m["made"], m["runs"], m["best"]
        print(
            f"checkpoint: {mib(made['bytes'])} in {made['variables']} variables (largest tensor "
            f"{mib(made['largest'])}), TF2 object-based, written in {made['seconds']:.1f} s"
        )
        rows = [
            ("baseline: CheckpointReader reads every tensor", best["baseline"]),
            ("audit float16 (streams the shards)", best["audit"]),
            ("audit float16, verify_checksums (TF reader)", best["verify"]),
        ]
        if m["convert"]:
            rows.append(("convert to float16 + verify (mpdoctor)", m["convert"]))
        width = max(len(name) for name, _ in rows)
        print(f"{'':{width}}  {'time':>8}  {'throughput':>12}  {'peak RSS':>10}")
        for name, r in rows:
            print(
                f"{name:{width}}  {r['seconds']:7.2f}s  {r['bytes'] / r['seconds'] / 2**20:8,.0f} MiB/s  "
                f"{mib(r['peak_rss']):>10}"
            )
        ratio = best["audit"]["seconds"] / best["baseline"]["seconds"]
        pairs = zip(runs["audit"], runs["baseline"], strict=True)
        all_ratios = ", ".join(f"{a['seconds'] / b['seconds']:.2f}" for a, b in pairs)
        print(
            f"audit / baseline time: {ratio:.2f} (target <= 1.3; per pair: {all_ratios}); with "
            f"verify_checksums: {best['verify']['seconds'] / best['baseline']['seconds']:.2f}"
        )
        budget, audit_rss = m["budget"], m["audit_rss"]
        print(
            f"audit peak RSS {mib(audit_rss)} vs target < 2 x largest tensor + baseline RSS = {mib(budget)}: "
            f"{'ok' if audit_rss < budget else 'OVER'}; above baseline: "
            f"{mib(audit_rss - best['baseline']['peak_rss'])}"
        )
        print(f"audit verdict: {best['audit']['verdict']}")
        return 0 if ratio <= 1.3 and audit_rss < budget else 1
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
