"""The training-step check against the truth of real training (issue 30), over the kept set of training scripts
(tests/data/training_scripts/, as users write them: module-level models, builders, trainer classes, closures, GANs,
accumulation, clipping, MirroredStrategy, fit; Keras 3 and tf_keras).

    python bench/training_steps.py [--root DIR] [--only NAME ...] [--json]   # the table
    python bench/training_steps.py --record [--only NAME ...]               # (re)record the truth

The truth (expected.toml): each script's own step on its own batch, run for STEPS applied steps under its policy and
again with every policy set to float32 (the same initial weights; bench/_training_truth.py), compared as total
updates (cosine, norm ratio); a second float32 run from another seed gives the noise floor of a random step (dropout).

Per script, mpdoctor from DIR (default: this checkout; `--root /work/main` measures another) runs:
- `check` on a copy: whether MP504 fired (truth: the script's training flushes);
- `check --fix --unsafe-fixes` on the copy: the fix outcome (verified by a training step / written with the step not
  compared / rejected by the step / refused / none);
- the step check itself on the copy (fixed or not), for the step the manifest names: did it run, and does its verdict
  (agrees with float32 or not) match the truth of that copy;
- when the copy was changed: the truth of the fixed copy, measured the same way: a written fix whose real step
  disagrees with float32 is "wrong and written".
Prints a table; never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

from mpdoctor.fix.step import MIN_COSINE, NORM_RATIO  # agreement with float32: the step check's

ROOT = Path(__file__).resolve().parent.parent
SET = ROOT / "tests" / "data" / "training_scripts"
MANIFEST = SET / "expected.toml"
TRUTH = Path(__file__).resolve().parent / "_training_truth.py"
STEPS = 5  # applied steps of the truth
NOISE_MARGIN = 0.05  # a random step agrees when its cosine is within this of two float32 runs' own
NOISE_SEEDS = 3  # more float32 runs from other seeds when the step is random
TIMEOUT = 900
QUICK = ("k3_module_model_scaled", "k3_keras2_api_on_keras3", "k2_trainer_class")

DIRECT = """
import json, sys
from pathlib import Path
from mpdoctor.config import Config
from mpdoctor.engine import TraceOptions, check_source
from mpdoctor.facts.trace_request import NumericsRequest, StepCheckRequest
path, function = sys.argv[1], sys.argv[2]
traces = []
options = TraceOptions(enabled=True, numerics=NumericsRequest(enabled=False), step_check=StepCheckRequest(function))
check_source(Path(path).read_text(), path, Config(), path=path, trace=options, traces=traces)
record = getattr(traces[0], "step_check", None) if traces else None
print(json.dumps(record.to_json() if record is not None else None))
"""


def manifest() -> dict[str, dict]:
    with open(MANIFEST, "rb") as handle:
        return tomllib.load(handle)


def _env(root: Path | None = None) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_USE_LEGACY_KERAS", None)
    if root is not None:
        env["PYTHONPATH"] = str(root)
    return env


def _last_json(stdout: str):
    for line in reversed(stdout.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def _run_truth(script: Path, spec: dict, runs: list[tuple[str, int]], folder: str) -> list:
    """[(result, update or None)] of the runs, in one process (bench/_training_truth.py)."""
    import numpy as np

    done = subprocess.run(
        [
            sys.executable,
            str(TRUTH),
            str(script),
            str(STEPS),
            json.dumps(spec),
            folder,
            ",".join(f"{policy}:{seed}" for policy, seed in runs),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=script.parent,
        timeout=TIMEOUT,
    )
    results = _last_json(done.stdout) or {}
    found = []
    for policy, seed in runs:
        result = results.get(f"{policy}-{seed}") or {"error": f"no result: {done.stderr.strip().splitlines()[-1:]}"}
        update = np.load(os.path.join(folder, f"{policy}-{seed}.npy")) if "error" not in result else None
        found.append((result, update))
    return found


def _cosine(a, b) -> float:
    import numpy as np

    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / norms) if norms else 0.0


def agrees(cosine: float, ratio: float, floor: float = 1.0) -> bool:
    return NORM_RATIO[0] <= ratio <= NORM_RATIO[1] and cosine > min(MIN_COSINE, floor - NOISE_MARGIN)


def measure_truth(script: Path, spec: dict) -> dict:
    """The truth of one script: {mixed, cosine, norm_ratio, float32_cosine, agrees, flushes}."""
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="mpdoctor-truth-") as folder:
        (mixed, low), (_, reference), (_, other) = _run_truth(
            script, spec, [("mixed", 0), ("float32", 0), ("float32", 1)], folder
        )
        others = [other]
        if other is not None and reference is not None and _cosine(reference, other) < 0.999:
            # a random step: its noise floor is the worst of a few float32 runs from other seeds
            more = [("float32", seed) for seed in range(2, 2 + NOISE_SEEDS)]
            others += [update for _, update in _run_truth(script, spec, more, folder)]
    if low is None:
        return {"mixed": f"raises: {mixed['error']}", "agrees": False, "flushes": False}
    if reference is None or any(o is None for o in others) or not np.any(reference):
        return {"mixed": "trains", "agrees": False, "flushes": False, "note": "the float32 run does not train"}
    cosine = _cosine(low, reference) if np.all(np.isfinite(low)) else 0.0
    ratio = float(np.linalg.norm(low) / np.linalg.norm(reference)) if np.all(np.isfinite(low)) else float("inf")
    floor = min(_cosine(reference, o) for o in others)
    return {
        "mixed": "trains" if mixed["applied"] else "never moves the weights",
        "cosine": round(cosine, 6),
        "norm_ratio": round(ratio, 6),
        "float32_cosine": round(floor, 6),
        "agrees": agrees(cosine, ratio, floor),
        # a deterministic step whose float16 updates depart from float32's: gradients lost to float16 (MP504's case)
        "flushes": floor >= 0.999 and not agrees(cosine, ratio),
    }


def record(names: list[str]) -> None:
    specs = manifest()
    lines = [
        "# The kept set of issue 30: each script's step, its batch and the models it trains (expressions in the",
        "# script's namespace), and its truth as `python bench/training_steps.py --record` measured it: the step",
        f"# run for {STEPS} applied steps (skipped overflow steps not counted) on the script's batch under its policy",
        "# and under float32 from the same initial weights; cosine and norm ratio of the two total updates;",
        "# float32_cosine: float32 runs from other seeds (the noise floor of dropout: the lowest of up to 4);",
        f"# agrees: norm ratio in [0.5, 2] and cosine > min({MIN_COSINE}, float32_cosine - 0.05); flushes: a step",
        "# that is not random (float32_cosine >= 0.999) and does not agree: gradients lost to float16.",
        "",
    ]
    for name, spec in specs.items():
        if names and name not in names:
            truth = {k[len("truth_") :]: v for k, v in spec.items() if k.startswith("truth_")}
        else:
            truth = measure_truth(SET / f"{name}.py", spec)
            print(name, truth, flush=True)
        lines.append(f"[{name}]")
        for key in ("keras", "step", "args", "models"):
            lines.append(f"{key} = {json.dumps(spec[key])}")
        for key, value in truth.items():
            lines.append(f"truth_{key} = {json.dumps(value)}")
        lines.append("")
    MANIFEST.write_text("\n".join(lines), encoding="utf-8")


def fix_outcome(root: Path, folder: Path, name: str) -> dict:
    """`check --fix --unsafe-fixes` of the copy `name` in `folder`, by mpdoctor from `root`."""
    before = (folder / name).read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--fix", "--unsafe-fixes", name],
        capture_output=True,
        text=True,
        env=_env(root),
        cwd=folder,
        timeout=TIMEOUT,
    )
    text = " ".join(done.stdout.split())
    outcome = "none"
    fixed = re.search(rf"Fixed \d+ problems? in {re.escape(name)} \(([^)]*\)?)\)", text)
    not_applied = re.findall(
        rf"{re.escape(name)}:\d+: (MP\d+) fix not applied: ([^\n]*?)(?= {re.escape(name)}:|$)", text
    )
    if fixed:
        outcome = "verified" if "verified by a training step" in fixed.group(1) else "written, step not compared"
    if not_applied:
        rejected = any("fixed step" in why for _, why in not_applied)
        outcome = (outcome + " + " if fixed else "") + ("rejected" if rejected else "refused")
    elif re.search(rf"{re.escape(name)}:\d+(:\d+)?: MP\d+ [^\n]*not fixed automatically", done.stdout):
        outcome = (outcome + " + " if fixed else "") + "refused"  # the static pass offers no fix, and says why
    return {
        "outcome": outcome,
        "changed": (folder / name).read_bytes() != before,
        "why": (fixed.group(1) if fixed else "; ".join(why for _, why in not_applied))[:160],
    }


def reports_mp504(root: Path, folder: Path, name: str) -> bool:
    """Whether a plain `check` of the copy `name` reports MP504 (after --fix a fixed MP504 is only counted)."""
    done = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", name],
        capture_output=True,
        text=True,
        env=_env(root),
        cwd=folder,
        timeout=TIMEOUT,
    )
    return bool(re.search(rf"{re.escape(name)}:\d+(:\d+)?: MP504", done.stdout))


def direct_step_check(root: Path, path: Path, function: str) -> dict | None:
    done = subprocess.run(
        [sys.executable, "-c", DIRECT, path.name, function],
        capture_output=True,
        text=True,
        env=_env(root),
        cwd=path.parent,
        timeout=TIMEOUT,
    )
    return _last_json(done.stdout)


def bench_script(root: Path, name: str, spec: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="mpdoctor-bench-steps-") as workdir:
        folder = Path(workdir)
        shutil.copy(ROOT / "tests" / "requirements.txt", folder / "requirements.txt")  # the TF 2.21 target
        shutil.copy(SET / f"{name}.py", folder / f"{name}.py")
        mp504 = reports_mp504(root, folder, f"{name}.py")
        fix = fix_outcome(root, folder, f"{name}.py")
        truth = {k[len("truth_") :]: v for k, v in spec.items() if k.startswith("truth_")}
        if fix["changed"]:
            truth = measure_truth(folder / f"{name}.py", spec)
        step = direct_step_check(root, folder / f"{name}.py", spec["step"]) or {"skipped": "no record"}
    ran = not step.get("skipped") and step.get("cosine") is not None
    says = agrees(step.get("cosine") or 0.0, step.get("norm_ratio") or 0.0) if ran else None
    return {
        "script": name,
        "fix": fix["outcome"],
        "why": fix["why"],
        "wrong_and_written": fix["changed"] and not truth.get("agrees"),
        "step_ran": ran,
        "step_says": says,
        "step_skipped": step.get("skipped"),
        "truth_agrees": truth.get("agrees"),
        "step_matches_truth": ran and says == truth.get("agrees"),
        "mp504": mp504,
        "truth_flushes": bool(spec.get("truth_flushes")),
    }


def table(rows: list[dict]) -> str:
    lines = [f"{'script':34} {'fix (check --fix)':28} {'step ran':8} {'=truth':6} {'MP504':6} {'flushes':7} note"]
    for r in rows:
        note = r["step_skipped"] or ("WRONG AND WRITTEN" if r["wrong_and_written"] else r["why"])
        lines.append(
            f"{r['script']:34} {r['fix']:28} {'yes' if r['step_ran'] else 'no':8} "
            f"{'yes' if r['step_matches_truth'] else 'no':6} {'yes' if r['mp504'] else 'no':6} "
            f"{'yes' if r['truth_flushes'] else 'no':7} {(note or '')[:110]}"
        )
    n = len(rows)
    count = lambda key: sum(1 for r in rows if r[key])  # noqa: E731
    lines.append(
        f"step check ran {count('step_ran')}/{n}, agrees with the truth {count('step_matches_truth')}/{n}; "
        f"fixes verified {sum(r['fix'].startswith('verified') for r in rows)}, "
        f"rejected {sum('rejected' in r['fix'] for r in rows)}, "
        f"written unverified {sum('not compared' in r['fix'] for r in rows)}, "
        f"wrong and written {count('wrong_and_written')}; "
        f"MP504 right {sum(r['mp504'] == r['truth_flushes'] for r in rows)}/{n}"
    )
    return "\n".join(lines)


def run(root: Path, names: list[str]) -> list[dict]:
    rows = []
    for name, spec in manifest().items():
        if names and name not in names:
            continue
        rows.append(bench_script(root, name, spec))
        print(f"  {name}: {rows[-1]['fix']}, step ran: {rows[-1]['step_ran']}", file=sys.stderr, flush=True)
    return rows


def results(quick: bool = False) -> list[dict]:
    """For bench/run.py: the shares over the set (a few scripts with --quick)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import row

    rows = run(ROOT, list(QUICK) if quick else [])
    n = len(rows)
    return [
        row("training steps: step check ran", sum(r["step_ran"] for r in rows) / n, None, target=">= 0.9", unit=""),
        row(
            "training steps: fixes wrong and written",
            sum(r["wrong_and_written"] for r in rows),
            None,
            target="0",
            unit="",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the mpdoctor checkout to measure")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="one script (repeatable)")
    parser.add_argument("--record", action="store_true", help="measure and record the truth in expected.toml")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    if args.record:
        record(args.only)
        return 0
    rows = run(args.root.resolve(), args.only)
    print(json.dumps(rows, indent=1) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
