"""Many model files (issue 17), measured side by side in one run on twenty small model scripts (bench/_scale_models.py:
each a different small Keras model, fourteen Keras 3, six tf_keras) and a ResNet50 script:

    python bench/scale.py [--quick] [--json]

1. `check --jobs 2` against `--jobs 1` (fork server on, no cache). Target: <= 0.65.
2. The fork server (TensorFlow imported once per environment) against `MPDOCTOR_FORK_SERVER=0` (a process per
   file), both `--jobs 2`. Target: <= 0.5.
3. The result cache: a second run with the cache warm against the cold run that filled it (target: the warm run
   under 1 s for the 20 files), and a run after editing one file (which must trace that file alone).
   The mpdoctor processes find their bytecode compiled (PYTHONPYCACHEPREFIX in a temporary directory), as an
   installed mpdoctor has it; this environment sets PYTHONDONTWRITEBYTECODE, which would make every start-up
   compile mpdoctor's sources again.
4. The default trace (numerics on) of a ResNet50 script (mixed_float16, weights=None, predicting a batch of 2)
   against plain `python resnet50.py`. Target: <= 1.5.
5. `--shard I/4` for I = 1..4: every file in exactly one shard, and `mpdoctor merge` of the four JSON reports gives
   the unsharded report (findings, errors, summary, targets, traced files).
--quick: 8 scripts, no process-per-file row, shards from the warm cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import PYTHON, main_for, python_env, row
from _scale_models import RESNET50, write_models


def _mpdoctor(args: list[str], cwd: Path, env: dict) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(
        [PYTHON, "-m", "mpdoctor", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise RuntimeError(f"mpdoctor {' '.join(args)} failed ({done.returncode}): {done.stderr[-1500:]}")
    return seconds, done


def _cache_note(stderr: str) -> str:
    return next((line for line in stderr.splitlines() if line.startswith("mpdoctor: cache:")), "")


def _comparable(report: dict) -> dict:
    """What `merge` must reproduce: the findings, errors, summary, targets and which files were traced (the traces'
    numbers come from models with random weights, different in every run)."""
    return {
        "diagnostics": report["diagnostics"],
        "errors": report["errors"],
        "summary": report["summary"],
        "files": report["files"],
        "traced": sorted(t["path"] for t in report["traces"]),
    }


def results(quick: bool = False) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="mpdoctor-scale-") as tmp:
        return _measure(Path(tmp), quick)


def _measure(tmp: Path, quick: bool) -> list[dict]:
    models = tmp / "models"
    files = write_models(models, 8 if quick else 20)
    count = len(files)
    env = python_env(PYTHONPYCACHEPREFIX=str(tmp / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("MPDOCTOR_NO_CACHE", None)
    env.pop("MPDOCTOR_CACHE_DIR", None)
    common = ["check", "--exit-zero", "-q", "--trace", "--trace-timeout", "1800"]
    cache = str(tmp / "cache")
    rows = []

    # Byte-compile mpdoctor (and warm the file system) with a static run, so no measured run pays for it.
    _mpdoctor(["check", "--no-trace", "--exit-zero", "-q", "."], models, env)

    one_job, _ = _mpdoctor([*common, "--no-cache", "--jobs", "1", "."], models, env)
    cold, done = _mpdoctor(
        [*common, "--cache-dir", cache, "--jobs", "2", "--format", "json", "-o", str(tmp / "whole.json"), "-v", "."],
        models,
        env,
    )
    whole = json.loads((tmp / "whole.json").read_text())
    traced = len(whole["traces"])
    rows.append(
        row(
            f"trace {count} scripts, --jobs 2",
            cold,
            one_job,
            target="<= 0.65",
            note=f"vs --jobs 1; fork server on, cold cache; {traced} traced, {whole['summary']['total']} findings",
        )
    )
    if not quick:
        per_process, _ = _mpdoctor(
            [*common, "--no-cache", "--jobs", "2", "."], models, dict(env, MPDOCTOR_FORK_SERVER="0")
        )
        forked, _ = _mpdoctor([*common, "--no-cache", "--jobs", "2", "."], models, env)
        rows.append(
            row(
                f"trace {count} scripts, fork server",
                forked,
                per_process,
                target="<= 0.5",
                note="TensorFlow imported once per environment vs MPDOCTOR_FORK_SERVER=0; both --jobs 2",
            )
        )

    warm, done = _mpdoctor([*common, "--cache-dir", cache, "--jobs", "2", "-v", "."], models, env)
    rows.append(
        row(
            f"cache warm, {count} scripts",
            warm,
            cold,
            target="< 1 s",
            note=f"vs the cold run that filled it; {_cache_note(done.stderr).split(' from ')[0][len('mpdoctor: ') :]}",
        )
    )
    edited = files[0]
    edited.write_text(edited.read_text() + "# edited\n")
    again, done = _mpdoctor([*common, "--cache-dir", cache, "--jobs", "2", "-v", "."], models, env)
    note = _cache_note(done.stderr)
    rows.append(
        row(
            "cache, one script edited",
            again,
            cold,
            note=f"checked again: {note.split('checked again: ')[-1] if 'checked again' in note else 'nothing'}",
        )
    )

    with tempfile.TemporaryDirectory(prefix="mpdoctor-resnet-") as place:
        script = Path(place) / "resnet50.py"
        script.write_text(RESNET50)
        start = time.perf_counter()
        subprocess.run([PYTHON, str(script)], cwd=place, env=env, capture_output=True, check=True)
        plain = time.perf_counter() - start
        traced_resnet, done = _mpdoctor([*common, "--no-cache", "--format", "json", "resnet50.py"], Path(place), env)
        report = json.loads(done.stdout)
        numerics = [m for t in report["traces"] for m in t["models"] if m.get("numerics")]
        rows.append(
            row(
                "trace, ResNet50 script, default (numerics)",
                traced_resnet,
                plain,
                target="<= 1.5",
                note=f"vs plain python running it (build + predict 2 images); numerics ran: {bool(numerics)}",
            )
        )

    shards = []
    shard_args = ["--cache-dir", cache] if quick else ["--no-cache"]
    for index in range(1, 5):
        out = tmp / f"shard{index}.json"
        _mpdoctor([*common, *shard_args, "--shard", f"{index}/4", "--format", "json", "-o", str(out), "."], models, env)
        shards.append(out)
    parts = [json.loads(p.read_text()) for p in shards]
    shard_files = [sorted(f["path"] for f in part["files"]) for part in parts]
    every = sorted(p for part in shard_files for p in part)
    covered = every == sorted(f["path"] for f in whole["files"]) and len(every) == len(set(every)) == count
    merged_out = subprocess.run(
        [PYTHON, "-m", "mpdoctor", "merge", "--exit-zero", "--format", "json", *map(str, shards)],
        cwd=models,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    merged = json.loads(merged_out.stdout)
    # Against the unsharded cold run (the edit since then appended a comment: no finding moved).
    same = _comparable(merged) == _comparable(whole)
    rows.append(
        row(
            "shard 4 ways + merge",
            None,
            None,
            note=f"files per shard {[len(f) for f in shard_files]}; every file once: {covered}; merged == unsharded: "
            f"{same}",
            unit="",
        )
    )
    shutil.rmtree(tmp / "pycache", ignore_errors=True)
    return rows


if __name__ == "__main__":
    raise SystemExit(main_for(results))
