"""The version matrix: for each supported TensorFlow minor, a virtualenv with that TensorFlow (its own Keras, and
tf_keras / tensorflow-hub where they exist for it), mpdoctor installed into it the way a user does (`pip install`
next to their TensorFlow, without the [tf] extra), then the smoke suite (ci/smoke.py) in it. Prints the
"Supported environments" table in docs/environments.md (markdown).

    python3 ci/matrix.py                      # every supported minor, the full smoke suite
    python3 ci/matrix.py --tf 2.13,2.21 --quick   # what .ci/run runs

Everything heavy is cached outside the repository, in $MPDOCTOR_MATRIX_CACHE (default ~/.cache/mpdoctor-matrix):
`wheels/` (every wheel, downloaded once; installs then read only from there) and `venvs/tf2.X-<hash>/` (one per
requirement set; reused while the pins are unchanged, only mpdoctor is reinstalled). Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = "3.11"  # every supported TensorFlow has wheels for it
MPDOCTOR_DEPENDENCIES = ("networkx>=3.0", "jinja2>=3.1", "libcst>=1.0", "protobuf>=4.21", "packaging>=22")
# mpdoctor's build backend, for pip's isolated build (never into the venv: setuptools >= 81 has no pkg_resources,
# which tensorflow-hub 0.16 imports, and a user's venv keeps the setuptools it came with).
BUILD = ("setuptools>=68", "wheel")


@dataclass(frozen=True)
class Minor:
    """One TensorFlow minor and what its users have beside it. Keras 3 is the release that was current when the
    TensorFlow minor came out (pip would pick the newest, which older TensorFlow may not run): the rows cover
    Keras 3.0 to 3.15."""

    tensorflow: str
    keras: str | None  # None: the Keras 2 that TensorFlow itself requires
    tf_keras: str | None  # None: no tf_keras for this TensorFlow
    hub: str

    def requirements(self) -> list[str]:
        found = [f"tensorflow=={self.tensorflow}", f"tensorflow-hub=={self.hub}"]
        if self.keras:
            found.append(f"keras=={self.keras}")
        if self.tf_keras:
            found.append(f"tf-keras=={self.tf_keras}")
        return found


MATRIX = {
    # tensorflow-hub 0.16 requires tf-keras, which starts at 2.14: TF 2.13 users have hub 0.15.
    "2.13": Minor("2.13.1", None, None, "0.15.0"),
    "2.15": Minor("2.15.1", None, "2.15.1", "0.16.1"),
    "2.16": Minor("2.16.2", "3.0.5", "2.16.0", "0.16.1"),
    "2.17": Minor("2.17.1", "3.4.1", "2.17.0", "0.16.1"),
    "2.18": Minor("2.18.1", "3.6.0", "2.18.0", "0.16.1"),
    "2.19": Minor("2.19.1", "3.9.2", "2.19.0", "0.16.1"),
    "2.20": Minor("2.20.0", "3.11.3", "2.20.1", "0.16.1"),
    "2.21": Minor("2.21.0", "3.15.1", "2.21.0", "0.16.1"),
}


def cache_dir() -> Path:
    return Path(os.environ.get("MPDOCTOR_MATRIX_CACHE") or Path.home() / ".cache" / "mpdoctor-matrix")


def run(command: list, **kwargs) -> subprocess.CompletedProcess:
    print("  $ " + " ".join(map(str, command)), flush=True)
    return subprocess.run([str(c) for c in command], check=True, **kwargs)


def base_python() -> str:
    """A Python 3.11 to create the venvs with (this one when it is 3.11)."""
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    found = shutil.which(f"python{PYTHON}")
    if found is None:
        sys.exit(f"matrix: needs Python {PYTHON} (python{PYTHON} on PATH)")
    return found


def stage_venv(cache: Path, stage: str, requirements: list[str]) -> Path:
    """A CI stage's venv (ci/no_tf.py, ci/backends.py): `requirements` installed once and reused while they are
    unchanged; mpdoctor editable and without dependencies, so the stage tests the working tree and nothing else."""
    key = hashlib.sha256(json.dumps([PYTHON, requirements]).encode()).hexdigest()[:10]
    venv = cache / "venvs" / f"{stage}-{key}"
    ready = venv / f".mpdoctor-{stage}-ready"
    if not ready.exists():
        shutil.rmtree(venv, ignore_errors=True)
        run([base_python(), "-m", "venv", venv])
        run([venv / "bin" / "python", "-m", "pip", "install", "-q", *requirements])
        ready.touch()
    run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", REPO])
    return venv


def download(minor: Minor, wheels: Path) -> None:
    """Every wheel the minor's venv needs into the cache (once: a stamp remembers the requirement set)."""
    stamp = wheels / f".downloaded-{_key(minor)}"
    if stamp.exists():
        return
    wheels.mkdir(parents=True, exist_ok=True)
    run(
        [base_python(), "-m", "pip", "download", "-q", "--only-binary", ":all:", "-d", wheels]
        + minor.requirements()
        + list(MPDOCTOR_DEPENDENCIES + BUILD)
    )
    stamp.touch()


def venv_for(minor: Minor, cache: Path) -> Path:
    """The minor's venv: its TensorFlow installed first (the user's environment), then mpdoctor's dependencies
    beside it; reused while the requirement set is unchanged."""
    venv = cache / "venvs" / f"tf{_minor_name(minor)}-{_key(minor)}"
    ready = venv / ".mpdoctor-matrix-ready"
    if ready.exists():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    wheels = cache / "wheels"
    download(minor, wheels)
    run([base_python(), "-m", "venv", venv])
    pip = [venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-index", "--find-links", wheels]
    run(pip + minor.requirements())
    run(pip + list(MPDOCTOR_DEPENDENCIES))
    ready.touch()
    return venv


def install_mpdoctor(venv: Path, cache: Path) -> None:
    """mpdoctor as a user installs it, without the [tf] extra: built from a clean copy of the working tree (tracked
    and new files, so nothing is written into the repository), dependencies already beside TensorFlow."""
    with tempfile.TemporaryDirectory(prefix="mpdoctor-src-") as tmp:
        source = Path(tmp) / "mpdoctor"
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            check=True,
            capture_output=True,
        ).stdout.decode()
        for name in filter(None, listed.split("\0")):
            origin = REPO / name
            if origin.is_file():
                (source / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, source / name)
        run(
            [venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-index", "--find-links", cache / "wheels"]
            + ["--force-reinstall", "--no-deps", source]
        )
        run([venv / "bin" / "python", "-m", "pip", "check"])  # mpdoctor's requirements met by the user's packages


def untouched(venv: Path, minor: Minor) -> list[str]:
    """Installing mpdoctor must leave the user's TensorFlow and Keras as they were: what changed, if anything."""
    script = (
        "import json, sys\nfrom importlib import metadata\n"
        "def version(name):\n"
        "    try:\n        return metadata.version(name)\n"
        "    except metadata.PackageNotFoundError:\n        return None\n"
        "print(json.dumps({name: version(name) for name in sys.argv[1:]}))"
    )
    pins = dict(requirement.split("==") for requirement in minor.requirements())
    found = json.loads(
        subprocess.run([venv / "bin" / "python", "-c", script, *pins], check=True, capture_output=True).stdout
    )
    return [f"{name} {version} became {found[name]}" for name, version in pins.items() if found[name] != version]


def smoke(venv: Path, quick: bool, out: Path) -> dict:
    command = [venv / "bin" / "python", REPO / "ci" / "smoke.py", "--json", out] + (["--quick"] if quick else [])
    start = time.monotonic()
    done = subprocess.run([str(c) for c in command])
    results = json.loads(out.read_text()) if out.exists() else {"results": [], "environment": {}}
    results["exit"] = done.returncode
    results["wall"] = round(time.monotonic() - start, 1)
    return results


def _minor_name(minor: Minor) -> str:
    return ".".join(minor.tensorflow.split(".")[:2])


def _key(minor: Minor) -> str:
    text = json.dumps([PYTHON, minor.requirements(), MPDOCTOR_DEPENDENCIES])
    return hashlib.sha256(text.encode()).hexdigest()[:10]


# ---------------------------------------------------------------------------------------------------- the table


def table(rows: list[dict]) -> str:
    """One row per TensorFlow minor: versions, then each smoke case pass/fail/n/a (per Keras it ran under), the
    check time of examples/hub_seed.py (static + trace, one file) and the smoke suite's wall time."""
    cases: list[str] = []
    for row in rows:
        for result in row["results"]:
            if result["case"] not in cases:
                cases.append(result["case"])
    header = ["TF", "Keras", "tf_keras", "hub", "Python", *cases, "hub_seed check (s)", "smoke (s)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        env = row["environment"]
        cells = [
            env.get("tensorflow") or row["tf"],
            env.get("keras") or "-",
            env.get("tf-keras") or "-",
            env.get("tensorflow-hub") or "-",
            env.get("python") or "-",
        ]
        for case in cases:
            found = [r for r in row["results"] if r["case"] == case]
            cells.append(" ".join(_cell(r) for r in found) if found else "-")
        seconds = [r["seconds"] for r in row["results"] if r["case"] == "hub_seed" and r["status"] != "n/a"]
        cells.append(f"{seconds[0]:.0f}" if seconds else "-")
        cells.append(f"{row.get('wall', 0):.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(result: dict) -> str:
    if result["status"] == "n/a":
        return "n/a"
    short = {"Keras 3": "K3", "tf_keras": "tfk", "Keras 2": "K2"}.get(result["keras"], result["keras"])
    return f"{result['status']} ({short})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tf", help=f"comma-separated TensorFlow minors (default: all of {', '.join(MATRIX)})")
    parser.add_argument("--quick", action="store_true", help="the short smoke suite")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every row's results here")
    args = parser.parse_args(argv)
    minors = args.tf.split(",") if args.tf else list(MATRIX)
    unknown = [m for m in minors if m not in MATRIX]
    if unknown:
        parser.error(f"unsupported TensorFlow {', '.join(unknown)} (supported: {', '.join(MATRIX)})")
    cache = cache_dir()
    rows = []
    start = time.monotonic()
    for name in minors:
        minor = MATRIX[name]
        print(f"== TensorFlow {name}: {' '.join(minor.requirements())}", flush=True)
        begun = time.monotonic()
        venv = venv_for(minor, cache)
        install_mpdoctor(venv, cache)
        changed = untouched(venv, minor)
        prepared = time.monotonic() - begun
        with tempfile.TemporaryDirectory() as tmp:
            row = smoke(venv, args.quick, Path(tmp) / "smoke.json")
        row.update(tf=name, prepared=round(prepared, 1), changed=changed)
        if changed:
            print(f"  FAIL: installing mpdoctor changed {', '.join(changed)}", flush=True)
            row["exit"] = row["exit"] or 1
        print(f"  TensorFlow {name}: venv+install {prepared:.0f} s, smoke {row['wall']:.0f} s", flush=True)
        rows.append(row)
    wall = time.monotonic() - start
    if args.json:
        args.json.write_text(json.dumps({"seconds": round(wall, 1), "rows": rows}, indent=1))
    print(table(rows))
    failed = [row["tf"] for row in rows if row["exit"]]
    print(f"matrix: {len(rows) - len(failed)}/{len(rows)} TensorFlow versions passed in {wall:.0f} s", flush=True)
    if failed:
        print(f"matrix: failed on TensorFlow {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
