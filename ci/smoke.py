"""The smoke suite of the version matrix: runs the `mpdoctor` installed next to this Python on the seed examples and
one input per trace form, and says for each case whether it passed. Standard library only; never imports
TensorFlow itself (each check runs in its own process, like a user's).

    VENV/bin/python ci/smoke.py [--quick] [--json FILE]

A case passes when `mpdoctor check` exits 0 or 1, its JSON is readable, mpdoctor traced the file (no "mpdoctor
cannot trace" finding, trace status not "internal") and the expected codes are reported, by the trace pass where
the case is a trace form. Keras 3 inputs are "n/a" where no Keras 3 is installed (TF <= 2.15); inputs that work on
any Keras (`tf.keras`) run under the `keras` package and, where TensorFlow routes tf.keras to an installed tf_keras
(TF >= 2.15), under tf_keras too (not with --quick).
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
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INPUTS = REPO / "ci" / "smoke_inputs"
SAVEDMODEL = REPO / "examples" / "savedmodels" / "feature_extractor"
SEED_HANDLE = "/tmp/tfhub_models/resnet_v1_50_feature_vector_5"  # the seeds' handle: replaced by a local copy
CANNOT_TRACE = "mpdoctor cannot trace"


@dataclass
class Case:
    name: str  # column of the README table
    path: Path
    keras: str  # "2": needs Keras 2 (sets TF_USE_LEGACY_KERAS); "3": Keras 3 only; "any": written for tf.keras
    traced: tuple[str, ...] = ()  # codes the trace pass must report (trace forms)
    static: tuple[str, ...] = ()  # codes that must be reported by either pass
    absent: tuple[str, ...] = ()  # codes that must not be reported
    quick: bool = True  # part of --quick (what .ci/run runs)
    html: bool = False  # also write the HTML report, judged as the case "HTML report"


CASES = [
    # --quick leaves it to the --fix case, which finds and fixes the same MP201 (verified by re-tracing).
    Case(
        "seed 000 hub",
        REPO / "tests/fixtures/MP201/seed_hub_mixed_float16_keras2.py",
        "2",
        traced=("MP201",),
        quick=False,
    ),
    Case(
        "seed 000 hub+Lambda",
        REPO / "tests/fixtures/MP201/seed_hub_lambda_cast_keras2.py",
        "2",
        traced=("MP201",),
        static=("MP207",),
        quick=False,
    ),
    Case("seed 000 TFSMLayer", REPO / "tests/fixtures/MP201/seed_tfsm_mixed_float16_keras3.py", "3", traced=("MP201",)),
    Case(
        "seed 000 TFSMLayer+Lambda",
        REPO / "tests/fixtures/MP201/seed_tfsm_lambda_cast_keras3.py",
        "3",
        traced=("MP201",),
        static=("MP207",),
        quick=False,
    ),
    Case("seed 003", REPO / "tests/fixtures/MP301/seed003_question_float16_saver_keras2.py", "2", traced=("MP301",)),
    Case(
        "seed 003 answer",
        REPO / "tests/fixtures/MP301/seed003_answer_cast_builder_keras2.py",
        "2",
        absent=("MP301", "MP001"),
        quick=False,
    ),
    Case("hub_seed", REPO / "examples/hub_seed.py", "2", traced=("MP201",), static=("MP207",), html=True),
    Case("MP401", INPUTS / "softmax_head.py", "any", traced=("MP401",)),
    # MP501 has no trace form yet: the static finding, and a clean trace of the loop's model (no MP001).
    Case("MP501", INPUTS / "custom_loop.py", "any", static=("MP501",), absent=("MP001",), quick=False),
    Case("MP301", INPUTS / "checkpoint_into_float16.py", "any", traced=("MP301",)),
    Case("MP404", INPUTS / "numerics_overflow.py", "any", traced=("MP404",)),
]


@dataclass
class Result:
    case: str
    keras: str  # the Keras it ran under: "Keras 3", "tf_keras", "Keras 2", or "" for n/a
    status: str  # pass | fail | n/a
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


def versions() -> dict:
    found = {"python": ".".join(map(str, sys.version_info[:3]))}
    for dist in ("tensorflow", "keras", "tf-keras", "tensorflow-hub", "mpdoctor"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def _major_minor(version: str | None) -> tuple[int, int]:
    major, minor = (version or "0.0").split(".")[:2]
    return int(major), int(re.sub(r"\D.*", "", minor) or 0)


def keras_modes(case: Case, env: dict, quick: bool) -> list[tuple[str, str | None]]:
    """(label, TF_USE_LEGACY_KERAS value) for each Keras the case runs under here; [] when none fits (n/a). The
    `keras` package is Keras 2 on TF <= 2.15 and Keras 3 from 2.16; TF >= 2.15 routes tf.keras to tf_keras with
    TF_USE_LEGACY_KERAS=1 (which the Keras 2 inputs set themselves)."""
    tf_keras = bool(env["tf-keras"]) and _major_minor(env["tensorflow"]) >= (2, 15)
    keras_major = _major_minor(env["keras"])[0]
    modes = []
    if case.keras in ("3", "any") and keras_major == 3:
        modes.append(("Keras 3", "0"))
    if (case.keras == "any" or (case.keras == "2" and not tf_keras)) and keras_major == 2:
        modes.append(("Keras 2", "0"))
    if tf_keras and (case.keras == "2" or (case.keras == "any" and not quick)):
        modes.append(("tf_keras", "1"))
    return modes


def stage(case: Case, work: Path) -> Path:
    """The case's input copied into the work directory, the seeds' TF Hub handle pointing at the bundled
    float32-only SavedModel (nothing is downloaded), which examples/hub_seed.py finds beside itself."""
    target = work / case.path.name
    if not (work / "savedmodels").exists():
        shutil.copytree(SAVEDMODEL.parent, work / "savedmodels")
    text = case.path.read_text(encoding="utf-8").replace(SEED_HANDLE, str(SAVEDMODEL))
    target.write_text(text, encoding="utf-8")
    return target


def mpdoctor(args: list[str], legacy: str, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, TF_USE_LEGACY_KERAS=legacy, TF_CPP_MIN_LOG_LEVEL="3", NO_COLOR="1")
    command = [str(Path(sys.executable).with_name("mpdoctor")), *args]
    start = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    return done, time.monotonic() - start


def judge(case: Case, done: subprocess.CompletedProcess) -> tuple[list[str], dict | None]:
    """What is wrong with one check's outcome ([] when the case passed), and its JSON report."""
    if done.returncode not in (0, 1):
        return [f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[-400:]}"], None
    try:
        report = json.loads(done.stdout)
    except ValueError:
        return [f"unreadable JSON: {done.stdout[:200]!r} {done.stderr[-300:]!r}"], None
    problems = []
    diagnostics = report["diagnostics"]
    for d in diagnostics:
        if d["code"] == "MP001" and CANNOT_TRACE in d["message"]:
            problems.append(d["message"][:400])
    for trace in report.get("traces", []):
        if trace.get("status") in ("internal", "failed"):
            problems.append(f"trace {trace['status']}: {trace.get('failure')}")
    if not report.get("traces"):
        problems.append("no trace ran")
    for trace in report.get("traces", []):
        for model in trace.get("models") or []:
            nodes = (model.get("graph") or {}).get("nodes") or []
            if nodes and not any(node.get("created_at") for node in nodes):
                problems.append(f"the hooks did not see the layers of model {model.get('name')!r} being created")
    for code in case.traced:
        if not any(d["code"] == code and "trace" in d["passes"] for d in diagnostics):
            problems.append(f"{code} not reported by the trace")
    for code in case.static:
        if not any(d["code"] == code for d in diagnostics):
            problems.append(f"{code} not reported")
    for code in case.absent:
        problems += [f"unexpected {code}: {d['message'][:300]}" for d in diagnostics if d["code"] == code]
    unexpected_crash = [
        d for d in diagnostics if d["code"] == "MP001" and d["severity"] == "error" and "MP001" not in case.traced
    ]
    problems += [f"MP001: {d['message'][:300]}" for d in unexpected_crash if "MP001" not in case.absent]
    return problems, report


def run_case(case: Case, env: dict, work: Path, quick: bool) -> list[Result]:
    modes = keras_modes(case, env, quick)
    if not modes:
        return [Result(case.name, "", "n/a")]
    results = []
    for label, legacy in modes:
        target = stage(case, work)
        html = work / "report.html"
        extra = ["--html", str(html)] if case.html else []
        done, seconds = mpdoctor(["check", "--format", "json", *extra, target.name], legacy, work)
        problems, _ = judge(case, done)
        results.append(Result(case.name, label, "fail" if problems else "pass", round(seconds, 1), problems))
        if case.html:
            problems = judge_html(html, env, target.name)
            results.append(Result("HTML report", label, "fail" if problems else "pass", 0.0, problems))
    return results


def judge_html(html: Path, env: dict, name: str) -> list[str]:
    """The HTML report: written, with the finding, the file and the environment."""
    text = html.read_text(encoding="utf-8") if html.exists() else ""
    if not text:
        return ["no HTML report written"]
    return [f"HTML report lacks {needed!r}" for needed in ("MP201", name, env["tensorflow"]) if needed not in text]


def run_fix(env: dict, work: Path) -> Result:
    """--fix on the first seed: the fix is verified by re-tracing, written, and the MP201 is gone from the file."""
    case = next(c for c in CASES if c.name == "seed 000 hub")
    label, legacy = keras_modes(case, env, True)[0]
    target = stage(case, work)
    before = target.read_text(encoding="utf-8")
    done, seconds = mpdoctor(["check", "--fix", "--format", "json", target.name], legacy, work)
    problems = []
    try:
        fixes = json.loads(done.stdout).get("fixes") or []
    except ValueError:
        fixes = []
        problems.append(f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[-400:]}")
    result = next((f for f in fixes if f["path"] == target.name), None)
    if result is None and not problems:
        problems.append("no fix result for the seed")
    elif result is not None:
        if result["verification"] != "verified" or not result["written"]:
            problems.append(f"fix {result['verification']!r}, written={result['written']}, error={result['error']}")
        if not any(a["code"] == "MP201" for a in result["applied"]):
            problems.append("the MP201 fix was not applied")
    after = target.read_text(encoding="utf-8")
    if after == before or "float32" not in after:
        problems.append("the seed was not rewritten with a float32 hub layer")
    return Result("--fix seed 000", label, "fail" if problems else "pass", round(seconds, 1), problems)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the short suite (.ci/run): fewer cases, one Keras each")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the environment and results here")
    args = parser.parse_args(argv)
    env = versions()
    print(f"smoke: {env}", flush=True)
    results: list[Result] = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mpdoctor-smoke-") as tmp:
        work = Path(tmp)
        for case in CASES:
            if args.quick and not case.quick:
                continue
            for result in run_case(case, env, work, args.quick):
                results.append(result)
                _show(result)
        result = run_fix(env, work)
        results.append(result)
        _show(result)
        shutil.rmtree(work / "pretrained_fp32", ignore_errors=True)
    wall = time.monotonic() - start
    failed = [r for r in results if r.status == "fail"]
    print(f"smoke: {len(results) - len(failed)}/{len(results)} passed or n/a in {wall:.0f} s", flush=True)
    if args.json:
        args.json.write_text(
            json.dumps({"environment": env, "seconds": round(wall, 1), "results": [vars(r) for r in results]}, indent=1)
        )
    return 1 if failed else 0


def _show(result: Result) -> None:
    where = f" [{result.keras}]" if result.keras else ""
    print(f"  {result.status:4} {result.case}{where} ({result.seconds:.1f} s)", flush=True)
    for problem in result.problems:
        print(f"       {problem}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
