"""Before/after of issue 29 on real code: the held-out repositories and the earlier real-code corpora.

    python bench/held_out.py                          # every corpus: per repository, per issue 29 class, totals
    python bench/held_out.py --corpus held_out        # held_out, wild, target, projects (repeatable)
    python bench/held_out.py --repo cpuguy96__StepCOVNet --verbose     # each finding and target decision
    python bench/held_out.py --repo OpenNMT__OpenNMT-tf --show-target  # mpdoctor's own --show-target text
    python bench/held_out.py --json                   # the judged results as JSON

Run it from any directory with the Python that has mpdoctor's dependencies (the repository's venv); the mpdoctor
measured is the one of this checkout. Each corpus is checked by `python -m mpdoctor check --no-trace --format json`
in child processes (this process never imports TensorFlow), with TF_USE_LEGACY_KERAS unset, so the target is
what the declarations, the code and the installed TensorFlow give, and compared with its ground truth:

- held_out: tests/data/held_out_repos/expected.toml (read its header). Each repository is copied to a temporary
  directory marked as its project root (an empty `.git`), as a user's clone would be. A finding that is neither
  expected nor a trap is a false alarm of class "unreviewed".
- wild: tests/data/wild/expected.json, as tests/test_wild_corpus.py judges it (every finding reviewed: correct or
  wrong), checked in place.
- target: tests/data/target_corpus (MANIFEST.toml and repro/), as tests/test_target_corpus.py judges it: any MP103
  or MP104 is a false alarm and every file's Keras is 2.
- projects: tests/data/projects, as tests/test_projects.py judges it: no MP401/MP403 on the three projects whose
  heads are float32 or have no saturating activation, no MP401 on nvidia-dle-convnets. Other findings there are
  listed as not judged.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import tomllib
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
HELD_OUT = DATA / "held_out_repos"
CORPORA = ("held_out", "wild", "target", "projects")
SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}
CHILD_TIMEOUT = 600


@dataclass(frozen=True)
class Reported:
    code: str
    path: str
    line: int
    cell: int | None
    severity: str
    message: str

    def where(self) -> str:
        cell = f" cell {self.cell}" if self.cell is not None else ""
        return f"{self.code} {self.severity} {self.path}{cell}:{self.line}"


@dataclass(frozen=True)
class Expectation:
    """An expected finding or a trap of expected.toml (see its header)."""

    kind: str  # "finding" or "trap"
    codes: tuple[str, ...]
    path: str
    lines: tuple[int, ...]  # () = any line
    cell: int | None
    klass: str
    why: str
    optional: bool = False
    severity: str | None = None  # findings: the least severity that counts
    min_severity: str | None = None  # traps: below it a finding is no false alarm

    def matches(self, r: Reported) -> bool:
        if r.code not in self.codes or (self.path and r.path != self.path):
            return False
        if (self.lines and r.line not in self.lines) or (self.cell is not None and r.cell != self.cell):
            return False
        least = self.severity if self.kind == "finding" else self.min_severity
        return least is None or SEVERITY_RANK.get(r.severity, 0) >= SEVERITY_RANK[least]

    def where(self) -> str:
        cell = f" cell {self.cell}" if self.cell is not None else ""
        return f"{'/'.join(self.codes)} {self.path or '*'}{cell}:{'/'.join(map(str, self.lines)) or '*'}"


@dataclass
class TargetCheck:
    klass: str
    under: str
    right: bool
    files: int
    wrong: list[str] = field(default_factory=list)  # "path: keras N (source: origin)" of the wrong files


@dataclass
class Judged:
    corpus: str
    name: str
    exit_code: int
    error: str = ""
    true_positives: list[tuple[str, str]] = field(default_factory=list)  # (class, where)
    misses: list[tuple[str, str]] = field(default_factory=list)
    false_alarms: list[tuple[str, str]] = field(default_factory=list)
    not_judged: list[str] = field(default_factory=list)
    targets: list[TargetCheck] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------ running mpdoctor


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def run_check(cwd: Path, paths: Sequence[str] = (".",), *extra: str) -> tuple[int, dict | None, str]:
    """`mpdoctor check --no-trace --format json PATHS` in `cwd`: (exit code, the report or None, stderr)."""
    args = [sys.executable, "-m", "mpdoctor", "check", "--no-trace", "--no-cache", "--format", "json", "-j", "1"]
    done = subprocess.run(
        [*args, *extra, *paths], cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=CHILD_TIMEOUT
    )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        report = None
    return done.returncode, report, done.stderr[-2000:]


def show_target(cwd: Path) -> str:
    args = [sys.executable, "-m", "mpdoctor", "check", "--no-trace", "--no-cache", "--show-target", "."]
    done = subprocess.run(args, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    return done.stdout + done.stderr


def reported(report: dict) -> list[Reported]:
    return [
        Reported(d["code"], d["path"], d["line"], d.get("cell"), d["severity"], d["message"])
        for d in report["diagnostics"]
    ]


def as_project(source: Path, into: Path) -> Path:
    """A copy of `source` marked as a project root (git cannot hold the `.git` marker itself)."""
    shutil.copytree(source, into)
    (into / ".git").touch()
    return into


# ------------------------------------------------------------------------------------------------ held-out repos


def load_expected(path: Path = HELD_OUT / "expected.toml") -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def expectations(repo: dict) -> list[Expectation]:
    found = []
    for kind, key in (("trap", "trap"), ("finding", "finding")):  # traps first: a warning on a trap is a false alarm
        for e in repo.get(key, []):
            codes = (e["code"],) if isinstance(e["code"], str) else tuple(e["code"])
            line = e.get("line", 0)
            lines = tuple(line) if isinstance(line, list) else ((line,) if line else ())
            found.append(
                Expectation(
                    kind=kind,
                    codes=codes,
                    path=e["path"],
                    lines=lines,
                    cell=e.get("cell"),
                    klass=e["class"],
                    why=e.get("why", ""),
                    optional=e.get("optional", False),
                    severity=e.get("severity"),
                    min_severity=e.get("min_severity"),
                )
            )
    return found


def judge_targets(repo: dict, files: list[dict]) -> list[TargetCheck]:
    checks = []
    for target in repo.get("target", []):
        under = target["under"]
        others = [t["under"] for t in repo["target"] if len(t["under"]) > len(under) and t["under"].startswith(under)]
        mine = [f for f in files if f["path"].startswith(under) and not any(f["path"].startswith(o) for o in others)]
        check = TargetCheck(target["class"], under, bool(mine), len(mine))
        if not mine:
            check.wrong.append(f"{under or '(all)'}: no file of the report is there")
        spec = SpecifierSet(target["tensorflow"]) if "tensorflow" in target else None
        for f in mine:
            keras, tf = f["target"]["keras"], f["target"]["tensorflow"]
            releases = tf.get("releases") or []
            tf_right = spec is None or (bool(releases) and all(spec.contains(r + ".0") for r in releases))
            if ("keras" in target and keras["major"] != target["keras"]) or not tf_right:
                check.right = False
                check.wrong.append(
                    f"{f['path']}: TF {tf['range']} [{tf['source']}], Keras {keras['major']} [{keras['source']}: "
                    f"{keras['origin']}]"
                )
        checks.append(check)
    return checks


def judge_repo(repo: dict, exit_code: int, report: dict | None, error: str) -> Judged:
    judged = Judged("held_out", repo["dir"], exit_code)
    if report is None or exit_code not in (0, 1):
        judged.error = error or f"exit {exit_code}"
        return judged
    judged.error = "; ".join(str(e) for e in report.get("errors", []))
    expected = expectations(repo)
    matched: set[int] = set()
    ignored = set(load_expected().get("ignore_codes", []))
    for r in reported(report):
        if r.code in ignored:
            continue
        hit = next((i for i, e in enumerate(expected) if e.matches(r)), None)
        if hit is None:
            judged.false_alarms.append(("unreviewed", f"{r.where()} {r.message[:160]}"))
        elif expected[hit].kind == "trap":
            judged.false_alarms.append((expected[hit].klass, f"{r.where()} ({expected[hit].why[:120]})"))
        else:
            matched.add(hit)
            judged.true_positives.append((expected[hit].klass, r.where()))
    for i, e in enumerate(expected):
        if e.kind == "finding" and not e.optional and i not in matched:
            judged.misses.append((e.klass, f"{e.where()} ({e.why[:120]})"))
    judged.targets = judge_targets(repo, report.get("files", []))
    return judged


def run_held_out(names: Iterable[str] | None, jobs: int, tmp: Path) -> list[Judged]:
    repos = [r for r in load_expected()["repo"] if not names or r["dir"] in names]

    def one(repo: dict) -> Judged:
        project = as_project(HELD_OUT / repo["dir"], tmp / "held_out" / repo["dir"])
        return judge_repo(repo, *run_check(project))

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, repos))


# ------------------------------------------------------------------------------------------------ earlier corpora


def source_line(path: Path, cell: int | None, line: int) -> str:
    """The text of a finding's line (a notebook's cells counted from 1, markdown included, as mpdoctor does)."""
    try:
        if path.suffix == ".ipynb":
            lines = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][(cell or 1) - 1]["source"]).split(
                "\n"
            )
        else:
            lines = path.read_text(encoding="utf-8").splitlines()
        return lines[line - 1]
    except (OSError, ValueError, IndexError, KeyError):
        return ""


def class_of_line(text: str, code: str, notebook: bool, default: str) -> str:
    """The issue 29 class a finding of the earlier corpora belongs to, from the code it is on."""
    if code in ("MP103", "MP502") and ("get_scaled_loss" in text or "get_unscaled_gradients" in text):
        return "flagged-api-evidence"
    if code == "MP101" and notebook:
        return "notebook-order"
    return default


def run_wild() -> Judged:
    wild = DATA / "wild"
    sources = json.loads((wild / "sources.json").read_text())
    expected = json.loads((wild / "expected.json").read_text())["findings"]
    code, report, error = run_check(ROOT, [str((wild / "files" / s["file"]).relative_to(ROOT)) for s in sources])
    judged = Judged("wild", "tests/data/wild", code)
    if report is None:
        judged.error = error
        return judged

    def klass(name: str, cell: int | None, line: int, code: str, default: str = "wild") -> str:
        text = source_line(wild / "files" / name, cell, line)
        return class_of_line(text, code, name.endswith(".ipynb"), default)

    actual = {(Path(r.path).name, r.cell, r.line, r.code): r for r in reported(report)}
    verdicts = {(name, f["cell"], f["line"], f["code"]): f["verdict"] for name, fs in expected.items() for f in fs}
    for key, r in actual.items():
        verdict = verdicts.get(key)
        bucket = judged.true_positives if verdict == "correct" else judged.false_alarms
        bucket.append((klass(*key, default="wild" if verdict else "unreviewed"), f"{key[0]} {r.where()}"))
    judged.misses = [
        (klass(*k), f"{k[0]} {k[3]}:{k[2]}") for k, v in verdicts.items() if v == "correct" and k not in actual
    ]
    return judged


def run_target(tmp: Path, jobs: int) -> list[Judged]:
    corpus = DATA / "target_corpus"
    manifest = tomllib.loads((corpus / "MANIFEST.toml").read_text(encoding="utf-8"))["file"]
    work = [(e["slug"], corpus / "files" / e["slug"], [e["path"]]) for e in manifest]
    work += [(f"repro/{p.name}", p, ["."]) for p in sorted((corpus / "repro").iterdir()) if p.is_dir()]

    def one(item: tuple[str, Path, list[str]]) -> Judged:
        name, source, paths = item
        project = as_project(source, tmp / "target" / name)
        code, report, error = run_check(project, paths)
        judged = Judged("target", name, code)
        if report is None:
            judged.error = error
            return judged
        for r in reported(report):
            if r.code in ("MP103", "MP104"):
                text = source_line(source / r.path, r.cell, r.line)
                judged.false_alarms.append((class_of_line(text, r.code, False, "target-corpus"), r.where()))
            else:
                judged.not_judged.append(r.where())
        files = report.get("files", [])
        majors = {f["path"]: f["target"]["keras"]["major"] for f in files}
        wrong = [f"{path}: Keras {major}" for path, major in majors.items() if major != 2]
        judged.targets = [TargetCheck("target-corpus", "", not wrong, len(files), wrong)]
        return judged

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, work))


PROJECT_CODES = {
    "nvidia-dle-unet-medical": {"MP401", "MP403"},
    "google-automl-efficientdet": {"MP401", "MP403"},
    "tf-models-resnet": {"MP401", "MP403"},
    "nvidia-dle-convnets": {"MP401"},
}


def run_projects(jobs: int) -> list[Judged]:
    projects = sorted(p for p in (DATA / "projects").iterdir() if p.is_dir())

    def one(project: Path) -> Judged:
        code, report, error = run_check(project)
        judged = Judged("projects", project.name, code)
        if report is None:
            judged.error = error
            return judged
        for r in reported(report):
            if r.code in PROJECT_CODES.get(project.name, set()):
                judged.false_alarms.append(("projects", r.where()))
            else:
                judged.not_judged.append(r.where())
        return judged

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, projects))


# ------------------------------------------------------------------------------------------------ printing


def target_cell(judged: Judged) -> str:
    if not judged.targets:
        return "-"
    wrong = [t for t in judged.targets if not t.right]
    return (
        "right"
        if not wrong
        else f"WRONG ({sum(len(t.wrong) for t in wrong)} of {sum(t.files for t in judged.targets)} files)"
    )


def print_repos(results: list[Judged], verbose: bool) -> None:
    width = max([len(j.name) for j in results] + [10])
    print(f"{'':{width}}  {'TP':>3} {'miss':>4} {'FA':>3}  {'exit':>4}  target")
    for j in results:
        tail = f"  ERROR: {j.error[:200]}" if j.error else ""
        print(
            f"{j.name:{width}}  {len(j.true_positives):>3} {len(j.misses):>4} {len(j.false_alarms):>3}  "
            f"{j.exit_code:>4}  {target_cell(j)}{tail}"
        )
        if verbose:
            for label, items in (("TP", j.true_positives), ("MISS", j.misses), ("FA", j.false_alarms)):
                for klass, where in items:
                    print(f"    {label:<4} [{klass}] {where}")
            for t in j.targets:
                state = "right" if t.right else "WRONG"
                print(f"    target [{t.klass}] {t.under or '(all)'}: {state} ({len(t.wrong)} of {t.files} files wrong)")
                for w in t.wrong[:3]:
                    print(f"      {w}")
            if j.not_judged:
                print(f"    not judged: {', '.join(j.not_judged[:8])}{' ...' if len(j.not_judged) > 8 else ''}")


def by_class(results: list[Judged], classes: Iterable[str] = ()) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {
        k: dict.fromkeys(("tp", "miss", "fa", "target_right", "target_wrong"), 0) for k in classes
    }

    def row(klass: str) -> dict[str, int]:
        return table.setdefault(klass, dict.fromkeys(("tp", "miss", "fa", "target_right", "target_wrong"), 0))

    for j in results:
        for klass, _ in j.true_positives:
            row(klass)["tp"] += 1
        for klass, _ in j.misses:
            row(klass)["miss"] += 1
        for klass, _ in j.false_alarms:
            row(klass)["fa"] += 1
        for t in j.targets:
            row(t.klass)["target_right" if t.right else "target_wrong"] += 1
    return table


def print_classes(table: dict[str, dict[str, int]]) -> None:
    width = max(len(k) for k in table) if table else 10
    print(f"{'class':{width}}  {'TP':>3} {'miss':>4} {'FA':>3}  target right/wrong")
    for klass, n in table.items():
        print(f"{klass:{width}}  {n['tp']:>3} {n['miss']:>4} {n['fa']:>3}  {n['target_right']}/{n['target_wrong']}")


def revision() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", choices=CORPORA, help="default: all")
    parser.add_argument("--repo", action="append", help="held-out repositories to run (directory names)")
    parser.add_argument("--jobs", type=int, default=2, help="child processes at once (default 2)")
    parser.add_argument("--verbose", action="store_true", help="list each finding and target decision")
    parser.add_argument("--show-target", action="store_true", help="print `check --show-target` of each repo")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    corpora = args.corpus or list(CORPORA)
    if args.repo:
        corpora = ["held_out"]

    results: dict[str, list[Judged]] = {}
    with tempfile.TemporaryDirectory(prefix="mpdoctor-held-out-") as tmp:
        if "held_out" in corpora:
            results["held_out"] = run_held_out(args.repo, args.jobs, Path(tmp))
            if args.show_target:
                for repo in results["held_out"]:
                    print(f"===== {repo.name}\n{show_target(Path(tmp) / 'held_out' / repo.name)}")
        if "wild" in corpora:
            results["wild"] = [run_wild()]
        if "target" in corpora:
            results["target"] = run_target(Path(tmp), args.jobs)
        if "projects" in corpora:
            results["projects"] = run_projects(args.jobs)

    classes = list(load_expected()["classes"])
    if args.json:
        print(json.dumps({c: [asdict(j) for j in js] for c, js in results.items()}, indent=1))
        return 0
    print(f"mpdoctor at {revision()}, static pass (--no-trace), TF_USE_LEGACY_KERAS unset\n")
    for corpus, judged in results.items():
        print(f"== {corpus}")
        print_repos(judged, args.verbose)
        print()
    if "held_out" in results:
        print("== held_out by issue 29 class")
        print_classes(by_class(results["held_out"], classes))
        print()
    print("== all corpora by class")
    print_classes(by_class([j for js in results.values() for j in js], classes))
    crashed = [j.name for js in results.values() for j in js if j.exit_code not in (0, 1)]
    if crashed:
        print(f"\ncrashed (exit not 0/1): {', '.join(crashed)}")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
