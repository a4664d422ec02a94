"""The golden snapshot: what `mpdoctor check` reports for every fixture, fix input, example and seed, in both Keras
versions, normalised for temporary paths, versions, float noise and the machine. It proves that a refactoring changed
no behaviour: record it before, compare after.

    python tests/golden/snapshot.py                 # compare the static snapshot (both Keras versions)
    python tests/golden/snapshot.py --trace         # compare the trace snapshot (static + trace pass, slow)
    python tests/golden/snapshot.py --update [...]  # re-record instead of comparing (review the diff!)
    python tests/golden/snapshot.py --only MP401    # restrict to inputs whose path contains MP401

One file per input and pass under tests/golden/snapshots/, named after the input's path with `/` as `__`
(`tests__fixtures__MP401__x.py.static.json`, `...trace.json`): plain JSON, sorted keys, so a change of behaviour is
a readable diff of the files it touched. Each holds `{"keras2": ..., "keras3": ...}`.

Static snapshot: per input and Keras version (TF_USE_LEGACY_KERAS=1 / 0), `check --no-trace --format json` and
`check --no-trace --diff --unsafe-fixes`, through the command line's `main` in this process. The static pass reads
the installed TensorFlow, keras and tensorflow-hub versions to resolve a file's target when nothing
declares it: the snapshot fixes them (`RECORDED_ENVIRONMENT`, what it was recorded next to), so it runs the same
with or without TensorFlow installed. Trace snapshot: `check --format json` (fixes of the trace included as edits)
in a child process, on the TensorFlow installed. Both run from the repository root, so paths are relative. What
describes the machine rather than mpdoctor (the trace's `cpu_bf16` and `gpus`) is normalised out.
tests/test_golden.py runs the static comparison, and the trace one on the golden inputs and examples.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import gzip
import io
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
KERAS = {"keras2": "1", "keras3": "0"}  # snapshot key -> TF_USE_LEGACY_KERAS


def inputs() -> list[str]:
    """Every input, relative to the repository root, sorted."""
    found = [
        *ROOT.glob("tests/fixtures/MP*/**/*.py"),
        *ROOT.glob("tests/fixes/MP*/*.in.py"),
        *ROOT.glob("examples/*.py"),
        *HERE.glob("inputs/*.py"),
        *HERE.glob("inputs/*.ipynb"),
    ]
    return sorted({p.relative_to(ROOT).as_posix() for p in found if p.name != "make_savedmodel.py"})


_TEMP = re.compile(r"/tmp/[\w.-]*mpdoctor[\w.-]*|/tmp/tmp[\w-]+")
_FLOAT = re.compile(r"(?<![\w.])(\d+\.\d{5,})(e[-+]?\d+)?")
# What changes from run to run without any change of behaviour: object addresses, and the statistics of models
# whose weights are randomly initialised (the numerics' values, checkpoint audits of such weights).
_ADDRESS = re.compile(r"\bat 0x[0-9a-f]+")
_MEASURED = re.compile(r"(max \|x\| )[-+\d.e]+|\d+\.\d+%")
_RANDOM_KEYS = {
    "uid",
    "max_abs",
    "max_abs_reference",
    "relative_error",
    "zeros",
    "flushed",
    "subnormal",
    "flushed_fraction",
    "subnormal_fraction",
    "flushed_values",
    "subnormal_values",
    "bytes_read",
}
# Facts about the machine the trace ran on, not about mpdoctor: whether the CPU computes bfloat16 natively, the GPUs.
_MACHINE_KEYS = {"cpu_bf16", "gpus"}


# The golden inputs' target is declared by this repository's own pyproject.toml: its lines move with unrelated edits.
_OWN_PYPROJECT_LINE = re.compile(r"\bpyproject\.toml:\d+")


def _normalise_text(text: str) -> str:
    text = text.replace(str(ROOT), "<repo>")
    text = _OWN_PYPROJECT_LINE.sub("pyproject.toml:<line>", text)
    text = _TEMP.sub("<tmp>", text)
    text = _ADDRESS.sub("at 0x<address>", text)
    text = _MEASURED.sub(lambda m: (m.group(1) or "") + "<measured>", text)
    return _FLOAT.sub(lambda m: f"{float(m.group(0)):.4g}", text)


_VOLATILE = {
    "tensorflow": "<version>",
    "keras": "<version>",
    "tf_keras": "<version>",
    "hub": "<version>",
    "version": "<version>",
    "seconds": "<seconds>",
}


def _normalise(value):
    """Paths, temp folders, versions, timings and the machine out; floats rounded to 4 significant digits
    (thread-order noise). A measured statistic is `<measured>` even when it is None (every value non-finite): which
    values of a float16 run overflow depends on the CPU and its kernels (AVX512-FP16, oneDNN).
    Idempotent: a snapshot recorded with an older normaliser compares after normalising it again."""
    if isinstance(value, dict):
        return {
            k: (
                _VOLATILE[k]
                if k in _VOLATILE and isinstance(v, (str, float))
                else "<machine>"
                if k in _MACHINE_KEYS
                else "<measured>"
                if k in _RANDOM_KEYS and (v is None or isinstance(v, (str, int, float))) and not isinstance(v, bool)
                else _normalise(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, str):
        return _normalise_text(value)
    return value


def _run(args: list[str], legacy: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_USE_LEGACY_KERAS=legacy, TF_CPP_MIN_LOG_LEVEL="3", NO_COLOR="1", COLUMNS="200")
    env["MPDOCTOR_NO_CACHE"] = "1"  # the snapshot records what a run computes, never a replay
    env.pop("FORCE_COLOR", None)
    return subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )


def _run_here(args: list[str], legacy: str) -> subprocess.CompletedProcess:
    """`mpdoctor check ARGS` in this process (the static pass imports nothing heavy: fast, and the same output)."""
    from mpdoctor.cli import main

    saved = {key: os.environ.get(key) for key in ("TF_USE_LEGACY_KERAS", "NO_COLOR", "FORCE_COLOR")}
    cwd = os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.update(TF_USE_LEGACY_KERAS=legacy, NO_COLOR="1")
        os.environ.pop("FORCE_COLOR", None)
        os.chdir(ROOT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["check", *args])
    finally:
        os.chdir(cwd)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def _json_result(result: subprocess.CompletedProcess) -> dict:
    try:
        report = json.loads(result.stdout)
    except ValueError:
        return {
            "exit": result.returncode,
            "stdout": _normalise_text(result.stdout),
            "stderr": _normalise_text(result.stderr),
        }
    report.pop("tool", None)
    return {"exit": result.returncode, "report": _normalise(report), "stderr": _normalise_text(result.stderr)}


def record(path: str, keras: str, trace: bool) -> dict:
    legacy = KERAS[keras]
    if trace:
        result = _json_result(_run(["--format", "json", path], legacy))
        # The per-file target (`files`) is the static pass's: recorded in the static snapshot, not twice.
        result.get("report", {}).pop("files", None)
        return {"json": result}
    diff = _run_here(["--no-trace", "--diff", "--unsafe-fixes", path], legacy)
    return {
        "json": _json_result(_run_here(["--no-trace", "--format", "json", path], legacy)),
        "diff": {
            "exit": diff.returncode,
            "stdout": _normalise_text(diff.stdout),
            "stderr": _normalise_text(diff.stderr),
        },
    }


SNAPSHOTS = HERE / "snapshots"


def suffix(trace: bool) -> str:
    return ".trace.json" if trace else ".static.json"


def snapshot_file(path: str, trace: bool) -> Path:
    """The snapshot file of one input: its path relative to the repository root, `/` written `__`."""
    if "__" in path:
        raise ValueError(f"{path}: a golden input's path cannot contain '__' (it stands for '/' in snapshot names)")
    return SNAPSHOTS / (path.replace("/", "__") + suffix(trace))


def load(trace: bool) -> dict:
    """{input path: {keras version: recorded}} of every snapshot file of the pass."""
    end = suffix(trace)
    return {
        file.name[: -len(end)].replace("__", "/"): json.loads(file.read_text(encoding="utf-8"))
        for file in sorted(SNAPSHOTS.glob("*" + end))
    }


def save(snapshot: dict, trace: bool, complete: bool) -> None:
    """Write one file per input of `snapshot`; `complete`: it is the whole snapshot, so the files of inputs that are
    gone are removed."""
    SNAPSHOTS.mkdir(exist_ok=True)
    written = set()
    for path, recorded in snapshot.items():
        file = snapshot_file(path, trace)
        file.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        written.add(file)
    if complete:
        for file in SNAPSHOTS.glob("*" + suffix(trace)):
            if file not in written:
                file.unlink()


# What the static snapshot was recorded next to: TensorFlow 2.21, keras 3 and tensorflow-hub installed.
# The static pass reads these (mpdoctor.project.environment) where nothing declares a file's target; fixing them
# makes the snapshot the same with another TensorFlow installed, or none.
RECORDED_ENVIRONMENT = {
    "tensorflow_version": (2, 21),
    "standalone_keras_major": 3,
    "hub_installed": True,
    "keras_backend": None,  # neither KERAS_BACKEND nor keras.json: Keras's default backend
}


@contextlib.contextmanager
def recorded_environment():
    """The static pass sees RECORDED_ENVIRONMENT as the installed packages (TF_USE_LEGACY_KERAS is set per run)."""
    from unittest import mock

    from mpdoctor.project import environment

    answers = {name: (lambda value=value: value) for name, value in RECORDED_ENVIRONMENT.items()}
    with mock.patch.multiple(environment, **answers):
        yield


def take(paths: list[str], trace: bool, jobs: int) -> dict:
    keys = [(p, k) for p in paths for k in KERAS]
    if trace:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(lambda key: record(key[0], key[1], trace), keys))
    else:  # in this process: one at a time
        with recorded_environment():
            results = [record(path, keras, trace) for path, keras in keys]
    snap: dict = {}
    for (path, keras), result in zip(keys, results, strict=True):
        snap.setdefault(path, {})[keras] = result
    return snap


def differences(expected: dict, actual: dict) -> list[str]:
    """Human-readable differences, one block per (input, Keras version) that changed."""
    out = []
    for path in sorted(set(expected) | set(actual)):
        for keras in KERAS:
            old = expected.get(path, {}).get(keras)
            new = actual.get(path, {}).get(keras)
            if old == new:
                continue
            old_text = json.dumps(old, indent=1, sort_keys=True).splitlines()
            new_text = json.dumps(new, indent=1, sort_keys=True).splitlines()
            out.append(
                f"== {path} [{keras}]\n"
                + "\n".join(difflib.unified_diff(old_text, new_text, "golden", "now", n=2, lineterm=""))
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", action="store_true", help="the trace snapshot (static + trace pass)")
    parser.add_argument("--update", action="store_true", help="re-record the snapshot instead of comparing")
    parser.add_argument("--only", help="restrict to inputs whose path contains this text")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--save", type=Path, metavar="FILE.json.gz", help="also write what this run recorded")
    args = parser.parse_args(argv)
    paths = [p for p in inputs() if not args.only or args.only in p]
    where = f"{SNAPSHOTS.relative_to(ROOT)}/*{suffix(args.trace)}"
    expected = load(args.trace)
    actual = take(paths, args.trace, args.jobs)
    if args.save:
        args.save.write_bytes(gzip.compress(json.dumps(actual).encode(), mtime=0))
    if args.update:
        save(actual, args.trace, complete=not args.only)
        print(f"{where}: {len(actual)} inputs recorded")
        return 0
    found = compare(expected, actual)
    print("\n".join(found) if found else f"{len(actual)} inputs: identical to {where}")
    return 1 if found else 0


def compare(expected: dict, actual: dict) -> list[str]:
    """Differences of the inputs in `actual` from the snapshot (normalised again: normalising is idempotent)."""
    return differences({p: _normalise(v) for p, v in expected.items() if p in actual}, actual)


if __name__ == "__main__":
    sys.exit(main())
