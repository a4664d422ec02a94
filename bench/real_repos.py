"""How often the trace reaches the model of a real repository (issue 31): tests/data/real_repos, 20 public
repositories kept as projects (SOURCES.md), each with the entries that build a model when run as their users
run them (expected.toml, found with --ground-truth).

    python bench/real_repos.py --setup-venvs                       # per repository: a venv with its dependencies
    python bench/real_repos.py --ground-truth                      # run every entry as its user would; models built
    python bench/real_repos.py                                     # trace every repository; the table
    python bench/real_repos.py --checkout /work/main --json        # measure another mpdoctor checkout (a BEFORE column)

Each repository is copied to a temporary directory marked as its project root (an empty `.git`, as a clone) and
checked with `python -m mpdoctor check --trace --format json .` from there, once per environment:

- deps: the repository's venv of --setup-venvs (its Python sees the running Python's TensorFlow through a .pth
  file, and the repository's declared non-TensorFlow dependencies that install from the package index as wheels
  were installed into it one by one, under a constraints file that keeps TensorFlow's own pins);
- bare: the Python running this script (mpdoctor and TensorFlow only, as the README's CI snippets install);
- stub: bare with `--stub-missing`, when the measured checkout's `check --help` lists it.

A repository is reached in an environment when one of its trace records holds a built model; an entry is reached
when its own record does. The denominators are the repositories (and entries) that build a model when run
(expected.toml), and, for the deps column, those whose dependencies all installed. Per-repository reasons
name what stopped each missed entry (its trace record's exception, or that the file built no model on import).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "real_repos"
PROBE = Path(__file__).resolve().parent / "_real_repos_probe.py"
DEFAULT_VENVS = Path("/tmp/realrepos-venvs")
INSTALL_LOG = "mpd-real-repos-installed.json"
# Installing a repository's pins must not replace what TensorFlow itself runs on in the shared venv.
KEPT_PINS = (
    "numpy",
    "tensorflow",
    "keras",
    "protobuf",
    "ml-dtypes",
    "h5py",
    "tf-keras",
    "absl-py",
    "grpcio",
    "wrapt",
    "gast",
    "optree",
)
CHECK_TIMEOUT = 1800
RUN_TIMEOUT = 600
SDIST_TIMEOUT = 180


@dataclass(frozen=True)
class Entry:
    path: str
    cwd: str
    pythonpath: tuple[str, ...]
    args: tuple[str, ...]
    builds_model: bool
    policy: str
    outcome: str
    built: str = ""  # "import": the model is built when the file runs top to bottom; "main": under __main__ only


@dataclass(frozen=True)
class Repo:
    dir: str
    repository: str
    declared: tuple[str, ...]
    entries: tuple[Entry, ...]
    undeclared: tuple[str, ...] = ()

    @property
    def dependencies(self) -> tuple[str, ...]:
        """What a user installs to run it: the declared dependencies and the imports it needs but does not declare."""
        return self.declared + self.undeclared

    @property
    def model_entries(self) -> tuple[Entry, ...]:
        return tuple(entry for entry in self.entries if entry.builds_model)


@dataclass
class Measured:
    """One repository traced in one environment."""

    reached: bool
    entries_reached: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    exit_code: int = 0
    findings: dict[str, int] = field(default_factory=dict)


def load_corpus(corpus: Path = CORPUS) -> list[Repo]:
    data = tomllib.loads((corpus / "expected.toml").read_text(encoding="utf-8"))
    repos = []
    for raw in data["repo"]:
        entries = tuple(
            Entry(
                path=item["path"],
                cwd=item["cwd"],
                pythonpath=tuple(item.get("pythonpath", ())),
                args=tuple(item.get("args", ())),
                builds_model=bool(item.get("builds_model", False)),
                policy=item.get("policy", ""),
                outcome=item.get("outcome", ""),
                built=item.get("built", ""),
            )
            for item in raw.get("entry", ())
        )
        declared, undeclared = tuple(raw.get("declared", ())), tuple(raw.get("undeclared", ()))
        repos.append(Repo(raw["dir"], raw["repository"], declared, entries, undeclared))
    return repos


def copy_as_clone(repo: Repo, into: Path) -> Path:
    target = into / repo.dir
    shutil.copytree(CORPUS / repo.dir, target)
    (target / ".git").mkdir()
    return target


# -- environments -------------------------------------------------------------------------------------------------


def repo_python(venvs: Path, repo: Repo) -> str:
    return str(venvs / repo.dir / "bin" / "python")


def setup_venvs(venvs: Path, repos: Sequence[Repo]) -> None:
    """One venv per repository (one repository's pins must not break another's), each seeing this Python's
    TensorFlow through a .pth file and holding the repository's dependencies that install."""
    ours = subprocess.run(
        [sys.executable, "-c", "import site; print(site.getsitepackages()[0])"],
        capture_output=True,
        text=True,
        check=True,
    )
    frozen = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    venvs.mkdir(parents=True, exist_ok=True)
    constraints = venvs / "constraints.txt"
    constraints.write_text(
        "".join(line + "\n" for line in frozen.splitlines() if line.split("==")[0].lower() in KEPT_PINS)
    )
    for repo in repos:
        venv = venvs / repo.dir
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = repo_python(venvs, repo)
        site = subprocess.run(
            [python, "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True, text=True, check=True
        )
        Path(site.stdout.strip(), "zz_mpdoctor_tensorflow.pth").write_text(ours.stdout.strip() + "\n")
        installed = {spec: _pip_install(python, constraints, spec) for spec in repo.dependencies}
        for spec, done in installed.items():
            print(f"{repo.dir}: {spec}: {'installed' if done else 'not installed'}", file=sys.stderr)
        (venv / INSTALL_LOG).write_text(json.dumps(installed, indent=1))


def _pip_install(python: str, constraints: Path, spec: str) -> bool:
    """A wheel if there is one; else the sdist, if it builds within SDIST_TIMEOUT (an old pin that compiles for
    minutes, or not at all on this Python, counts as not installing)."""
    for options, timeout in ((["--only-binary", ":all:"], RUN_TIMEOUT), ([], SDIST_TIMEOUT)):
        command = [python, "-m", "pip", "install", "-q", *options, "-c", str(constraints), spec]
        try:
            if subprocess.run(command, capture_output=True, timeout=timeout).returncode == 0:
                return True
        except subprocess.TimeoutExpired:
            pass
    return False


def read_installed(venvs: Path, repos: Sequence[Repo]) -> dict[str, dict[str, bool]]:
    logs = {repo.dir: venvs / repo.dir / INSTALL_LOG for repo in repos}
    return {name: json.loads(log.read_text()) for name, log in logs.items() if log.exists()}


def deps_install(repo: Repo, installed: dict[str, dict[str, bool]]) -> bool:
    return all(installed.get(repo.dir, {}).get(spec, False) for spec in repo.dependencies)


def has_stub_missing(python: str, checkout: Path) -> bool:
    helped = subprocess.run(
        [python, "-m", "mpdoctor", "check", "--help"], capture_output=True, text=True, env=_env(checkout), timeout=120
    )
    return "--stub-missing" in helped.stdout


def _env(checkout: Path, extra_path: Sequence[str] = ()) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("TF_USE_LEGACY_KERAS", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join([*extra_path, str(checkout)])
    env["MPDOCTOR_NO_CACHE"] = "1"
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return env


# -- ground truth ---------------------------------------------------------------------------------------------------


def run_entry(python: str, repo: Repo, entry: Entry, scratch: Path) -> dict[str, object]:
    """Runs one entry as its user would (in a fresh copy) and returns the probe's record."""
    clone = copy_as_clone(repo, Path(tempfile.mkdtemp(dir=scratch)))
    out = clone.parent / "probe.json"
    site = clone.parent / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import _real_repos_probe\n\n_real_repos_probe.install()\n")
    extra = [str(clone / path) for path in entry.pythonpath]
    if entry.path.endswith(".ipynb"):
        command = [python, str(PROBE), str(out), str(clone / entry.path)]
        extra.append(str(PROBE.parent))
    else:
        command = [python, str(clone / entry.path), *entry.args]
        extra += [str(site), str(PROBE.parent)]
    env = _env(Path(os.devnull), extra)
    env["PYTHONPATH"] = os.pathsep.join(extra)
    env["MPD_PROBE_OUT"] = str(out)
    env["MPLBACKEND"] = "Agg"
    try:
        done = subprocess.run(
            command, cwd=clone / entry.cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT
        )
        code: object = done.returncode
    except subprocess.TimeoutExpired:
        code = "timeout"
    record: dict[str, object] = json.loads(out.read_text()) if out.exists() else {"models": [], "error": "no record"}
    record["exit"] = code
    return record


def ground_truth(venvs: Path, repos: Sequence[Repo]) -> None:
    with tempfile.TemporaryDirectory(prefix="mpd-real-gt-") as scratch:
        for repo in repos:
            for entry in repo.entries:
                record = run_entry(repo_python(venvs, repo), repo, entry, Path(scratch))
                models = record["models"]
                assert isinstance(models, list)
                policies = sorted({str(model["policy"]) for model in models})
                outcome = record["error"] or "ok"
                print(f"{repo.dir}/{entry.path}: exit {record['exit']}, {len(models)} model(s) {policies}; {outcome}")


# -- trace measurement ----------------------------------------------------------------------------------------------


def trace_repo(python: str, checkout: Path, repo: Repo, stub: bool, timeout: int, keep: Path | None) -> Measured:
    """Traces one repository; `keep` (a directory) receives the raw report, for --rejudge."""
    with tempfile.TemporaryDirectory(prefix="mpd-real-") as scratch:
        clone = copy_as_clone(repo, Path(scratch))
        command = [
            python,
            "-m",
            "mpdoctor",
            "check",
            "--trace",
            "--format",
            "json",
            *(["--stub-missing"] if stub else []),
            ".",
        ]
        try:
            done = subprocess.run(
                command, cwd=clone, env=_env(checkout), capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return Measured(False, reasons={"*": f"check did not finish in {timeout} s"}, exit_code=-1)
    try:
        report: dict[str, object] = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        report = {"error": f"no JSON report (exit {done.returncode}): {tail[:200]}"}
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"{repo.dir}.json").write_text(json.dumps({"exit": done.returncode, "report": report}))
    return judge(repo, report, done.returncode)


def judge(repo: Repo, report: dict[str, object], exit_code: int) -> Measured:
    if "error" in report:
        return Measured(False, reasons={"*": str(report["error"])}, exit_code=exit_code)
    traces = {str(trace["path"]): trace for trace in _records(report, "traces")}
    reached = any(trace.get("models") for trace in traces.values())
    measured = Measured(reached, exit_code=exit_code, findings=dict(_summary(report).get("by_code", {})))
    for entry in repo.model_entries:
        trace = traces.get(entry.path)
        if trace is not None and trace.get("models"):
            measured.entries_reached.append(entry.path)
        else:
            measured.reasons[entry.path] = miss_reason(trace)
    return measured


def miss_reason(trace: dict[str, object] | None) -> str:
    if trace is None:
        return "not traced (no trace record)"
    run = trace.get("entry_run")
    if isinstance(run, dict) and run.get("needs_arguments"):
        return f"needs command-line arguments ({', '.join(map(str, run['needs_arguments']))})"
    exception = trace.get("exception") or trace.get("failure")
    if exception:
        return str(exception).splitlines()[0][:200]
    main = ", nor under __main__" if isinstance(run, dict) and run.get("as_main") else ""
    return f"traced ({trace.get('status')}), no model built on import or by a builder it calls{main}"


def _records(report: dict[str, object], key: str) -> list[dict[str, object]]:
    value = report.get(key, [])
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _summary(report: dict[str, object]) -> dict[str, dict[str, int]]:
    summary = report.get("summary", {})
    return summary if isinstance(summary, dict) else {}


# -- table ----------------------------------------------------------------------------------------------------------


@dataclass
class Column:
    name: str
    measured: dict[str, Measured]
    only_installable: bool = False


def fractions(repos: Sequence[Repo], column: Column, installed: dict[str, dict[str, bool]]) -> dict[str, object]:
    """Repositories and entries reached, of those that build a model when run (for deps: and whose dependencies
    all installed); `at_import`: the entries whose model is built when the file runs top to bottom, the ones an
    import reaches (an entry building under `if __name__ == "__main__":` is reached by a builder, or by the trace
    running that block when importing it builds nothing)."""
    pool = [r for r in repos if r.model_entries and (not column.only_installable or deps_install(r, installed))]
    entries = [(repo, entry) for repo in pool for entry in repo.model_entries if repo.dir in column.measured]
    at_import = [(repo, entry) for repo, entry in entries if entry.built == "import"]

    def reached(chosen: list[tuple[Repo, Entry]]) -> int:
        return sum(entry.path in column.measured[repo.dir].entries_reached for repo, entry in chosen)

    repos_reached = sum(column.measured[repo.dir].reached for repo in pool if repo.dir in column.measured)
    failing = sum(column.measured[repo.dir].exit_code not in (0, 1) for repo in repos if repo.dir in column.measured)
    gate = sum(column.measured[repo.dir].exit_code != 0 for repo in repos if repo.dir in column.measured)
    return {
        "repos": f"{repos_reached}/{len(pool)}",
        "entries": f"{reached(entries)}/{len(entries)}",
        "entries_at_import": f"{reached(at_import)}/{len(at_import)}",
        "gate_failed": gate,
        "exit_2_or_crash": failing,
    }


def print_table(repos: Sequence[Repo], columns: Sequence[Column], installed: dict[str, dict[str, bool]]) -> None:
    header = f"{'repository':46} {'installs':8} " + " ".join(f"{column.name:>8}" for column in columns)
    print(header)
    for repo in repos:
        cells = []
        for column in columns:
            measured = column.measured.get(repo.dir)
            cells.append(
                f"{'-' if measured is None else f'{len(measured.entries_reached)}/{len(repo.model_entries)}':>8}"
            )
        deps = "all" if deps_install(repo, installed) else "no"
        print(f"{repo.dir:46} {deps:8} " + " ".join(cells))
    for column in columns:
        print(f"{column.name}: {json.dumps(fractions(repos, column, installed))}")
    print("\nreasons for misses:")
    for column in columns:
        for repo in repos:
            measured = column.measured.get(repo.dir)
            for path, reason in (measured.reasons if measured else {}).items():
                print(f"  [{column.name}] {repo.dir}/{path}: {reason}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--checkout", type=Path, default=ROOT, help="the mpdoctor checkout to measure (default: this one)"
    )
    parser.add_argument(
        "--venvs", type=Path, default=DEFAULT_VENVS, help="the per-repository deps venvs (--setup-venvs)"
    )
    parser.add_argument(
        "--setup-venvs", action="store_true", help="create --venvs and install each repository's dependencies"
    )
    parser.add_argument("--ground-truth", action="store_true", help="run every entry as its user would (in its venv)")
    parser.add_argument("--only", action="append", default=[], help="a repository directory (repeatable)")
    parser.add_argument("--env", action="append", choices=("deps", "bare", "stub"), help="environments (default: all)")
    parser.add_argument("--timeout", type=int, default=CHECK_TIMEOUT, help="seconds per repository check")
    parser.add_argument("--json", action="store_true", help="print the measurements as JSON")
    parser.add_argument("--reports", type=Path, help="keep each raw report under this directory (DIR/ENV/REPO.json)")
    parser.add_argument("--rejudge", type=Path, help="judge the reports kept under this directory; trace nothing")
    args = parser.parse_args(argv)
    repos = [repo for repo in load_corpus() if not args.only or repo.dir in args.only]
    if args.setup_venvs:
        setup_venvs(args.venvs, repos)
        return 0
    if args.ground_truth:
        ground_truth(args.venvs, repos)
        return 0
    installed = read_installed(args.venvs, repos)
    columns = rejudge(args.rejudge, repos) if args.rejudge else measure(args, repos, installed)
    if args.json:
        out = {
            c.name: {
                "fractions": fractions(repos, c, installed),
                "repos": {d: asdict(m) for d, m in c.measured.items()},
            }
            for c in columns
        }
        print(json.dumps(out, indent=1))
    else:
        print_table(repos, columns, installed)
    return 0


def rejudge(kept: Path, repos: Sequence[Repo]) -> list[Column]:
    columns = []
    for name in ("deps", "bare", "stub"):
        if not (kept / name).is_dir():
            continue
        measured = {}
        for repo in repos:
            saved = kept / name / f"{repo.dir}.json"
            if saved.exists():
                data = json.loads(saved.read_text())
                measured[repo.dir] = judge(repo, data["report"], data["exit"])
        columns.append(Column(name, measured, only_installable=name == "deps"))
    return columns


def measure(args: argparse.Namespace, repos: Sequence[Repo], installed: dict[str, dict[str, bool]]) -> list[Column]:
    columns = []
    for name in args.env or ["deps", "bare", "stub"]:
        if name == "deps" and len(installed) < len(repos):
            print(f"no deps venvs under {args.venvs} (run --setup-venvs): deps column skipped", file=sys.stderr)
            continue
        if name == "stub" and not has_stub_missing(sys.executable, args.checkout):
            print("the measured checkout has no --stub-missing: stub column skipped", file=sys.stderr)
            continue
        measured = {}
        for repo in repos:
            python = repo_python(args.venvs, repo) if name == "deps" else sys.executable
            keep = args.reports / name if args.reports else None
            measured[repo.dir] = trace_repo(python, args.checkout, repo, name == "stub", args.timeout, keep)
            print(f"[{name}] {repo.dir}: {asdict(measured[repo.dir])}", file=sys.stderr)
        columns.append(Column(name, measured, only_installable=name == "deps"))
    return columns


if __name__ == "__main__":
    sys.exit(main())
