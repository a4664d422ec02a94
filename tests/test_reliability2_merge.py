"""Issue 32 (second hostile probe), items 02, 13, 14, 15, 16, and issue 33 item 7: writes that must refuse, `merge`
of forged, special, overlapping or incomplete reports, what `merge` may read, and text output escaped everywhere.
Each test is one reproduction of ../shared/repros/reliability-2/NN_*.sh (R02 = script 02), bounded in time."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli import mpdoctor
from test_reliability_property import EXAMPLES, make_folder, run_in, state

from mpdoctor import reads, writes
from mpdoctor.merge import ReportFormatError, read_report

MODEL = """import keras
keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
"""
ESCAPE = "\x1b]0;PWNED\x07"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "m.py").write_text(MODEL)
    return tmp_path


def _report(project: Path, name: str = "r.json", *args: str, files: tuple[str, ...] = ("m.py",)) -> dict:
    result = mpdoctor("check", "--no-trace", "--format", "json", "-o", name, *args, *files, cwd=project)
    assert result.returncode in (0, 1), result.stderr
    return json.loads((project / name).read_text())


def _one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mpdoctor: error: "), result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# ----------------------------------------------------------------------------------- 02: refusals that refuse


@pytest.mark.parametrize("option", ["-o", "--html"])
def test_R02_merge_never_writes_over_one_of_its_reports(project, option):
    _report(project)
    before = (project / "r.json").read_bytes()
    result = mpdoctor("merge", option, "r.json", "r.json", cwd=project)
    _one_line_error(result, "r.json", "not overwritten")
    assert result.stdout == ""  # refused before anything is merged or printed
    assert (project / "r.json").read_bytes() == before


@pytest.mark.parametrize("option", ["-o", "--html"])
def test_R02_plan_refuses_to_write_over_the_model_before_it_runs_anything(project, option):
    link = project / "link.py"
    link.symlink_to("m.py")  # the same file under another name
    for output in ("m.py", "link.py"):
        result = mpdoctor("plan", option, output, "m.py", cwd=project)
        _one_line_error(result, output, "not overwritten")
    assert (project / "m.py").read_text() == MODEL and link.is_symlink()


def test_R02_every_writer_refuses_a_file_of_the_run(tmp_path):
    checked = tmp_path / "keep.py"
    checked.write_text("x = 1\n")
    hard_link = tmp_path / "hard.py"
    os.link(checked, hard_link)
    for destination in (checked, hard_link):
        with pytest.raises(writes.WriteRefused, match="one of the files being checked"):
            writes.write_atomic(destination, "{}", refuse=[checked])
        with pytest.raises(writes.WriteRefused), writes.staged_file(destination, refuse=[checked]):
            pass
    staged = tmp_path / "staged"
    staged.write_text("{}")
    with pytest.raises(writes.WriteRefused):
        writes.publish(staged, checked, refuse=[checked])
    assert checked.read_text() == "x = 1\n"
    assert writes.refusal(tmp_path / "new.json", [checked]) is None  # a file that does not exist yet is fine
    writes.write_atomic(tmp_path / "new.json", "{}", refuse=[checked, tmp_path / "missing.py"])
    assert (tmp_path / "new.json").read_text() == "{}"


# ------------------------------------------------------------------------------ 13: forged and special inputs


def _forge_line(d: dict) -> None:
    d["diagnostics"].append(dict(d["diagnostics"][0], line="seven"))


FORGERIES = {
    "string line": (_forge_line, "$.diagnostics[1].line"),
    "null path": (lambda d: d["diagnostics"][0].update(path=None), "$.diagnostics[0].path"),
    "list path": (lambda d: d["diagnostics"][0].update(path=["a"]), "$.diagnostics[0].path"),
    "unknown code": (lambda d: d["diagnostics"][0].update(code="MP401<b>"), "unknown rule code"),
    "unknown severity": (lambda d: d["diagnostics"][0].update(severity="fatal"), "severity"),
    "files infinite": (lambda d: d["summary"].update(files=float("inf")), "$.summary.files"),
    "files huge": (lambda d: d["summary"].update(files=10**400), "$.summary.files"),
    "negative files": (lambda d: d["summary"].update(files=-1), "negative"),
    "edits not a list": (lambda d: d["diagnostics"][0]["fix"].update(edits={"a": 1}), "edits"),
    "forged edit key": (lambda d: d["diagnostics"][0]["fix"]["edits"][0].update(line=None), "edits[0].line"),
    "target not an object": (lambda d: d["files"][0].update(target=[]), "$.files[0].target"),
    "target version too long": (
        lambda d: d["files"][0]["target"]["tensorflow"].update(releases=["2." + "9" * 5000]),
        "$.files[0].target",
    ),
    "traces not a list": (lambda d: d.update(traces={"x": 1}), "$.traces"),
    "shard not a shard": (lambda d: d.update(shard={"index": 3, "count": 2}), "3/2"),
    "tool not an object": (lambda d: d.update(tool="mpdoctor"), "not an mpdoctor JSON report"),
}


@pytest.mark.parametrize("case", sorted(FORGERIES))
@pytest.mark.parametrize("output", ["text", "html"])
def test_R13_a_forged_report_is_one_line_naming_it(project, case, output):
    forge, reason = FORGERIES[case]
    data = _report(project, "good.json")
    forge(data)
    (project / "forged.json").write_text(json.dumps(data).replace("Infinity", "1e400"))
    result = mpdoctor("merge", "--format", output, "good.json", "forged.json", cwd=project)
    _one_line_error(result, "forged.json", reason)
    assert result.stdout == ""


def test_R13_a_fifo_or_device_is_refused_at_once(project):
    _report(project)
    os.mkfifo(project / "fifo.json")
    for special in ("fifo.json", "/dev/zero"):
        result = subprocess.run(
            [sys.executable, "-m", "mpdoctor", "merge", "r.json", special],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=60,  # a reader that blocks on the FIFO or reads /dev/zero to the end fails here
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        _one_line_error(result, special, "not a regular file")


def test_R13_a_report_larger_than_the_limit_is_refused_unread(project, monkeypatch):
    _report(project)
    monkeypatch.setattr(reads, "REPORT_LIMIT", 100)
    with pytest.raises(ReportFormatError, match="too large"):
        read_report(project / "r.json")


# ---------------------------------------------------------------------- 14 + #33.7: one complete run, no overlap


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Ten model files: every shard of a 1/2 and a 1/3 split gets some."""
    for i in range(10):
        (tmp_path / f"m{i}.py").write_text(MODEL)
    return tmp_path


def _shards(tree: Path, count: int) -> list[str]:
    names = []
    for index in range(1, count + 1):
        name = f"s{index}of{count}.json"
        data = _report(tree, name, "--shard", f"{index}/{count}", files=(".",))
        assert data["shard"] == {"index": index, "count": count}
        names.append(name)
    return names


def test_R14_a_shard_report_records_its_shard_and_an_unsharded_one_none(tree):
    assert "shard" not in _report(tree, "all.json", files=(".",))
    _shards(tree, 2)


def test_R14_the_same_report_twice_is_refused(project):
    _report(project, "a.json")
    _one_line_error(mpdoctor("merge", "a.json", "a.json", cwd=project), "a.json: given twice")
    _one_line_error(mpdoctor("merge", "a.json", "./a.json", cwd=project), "given twice")
    (project / "b.json").write_bytes((project / "a.json").read_bytes())  # a copy: the same file checked twice
    _one_line_error(mpdoctor("merge", "a.json", "b.json", cwd=project), "b.json: checked m.py too, as a.json did")


def test_R14_a_shard_twice_missing_shards_and_two_splits_are_refused(tree):
    halves, thirds = _shards(tree, 2), _shards(tree, 3)
    _report(tree, "all.json", files=(".",))
    copy = tree / "copy.json"
    copy.write_bytes((tree / halves[0]).read_bytes())
    _one_line_error(mpdoctor("merge", *halves, "copy.json", cwd=tree), "copy.json: shard 1/2 again (also s1of2.json)")
    _one_line_error(mpdoctor("merge", halves[0], cwd=tree), "incomplete set of shards: 2/2 missing (given 1 of 2)")
    _one_line_error(mpdoctor("merge", thirds[0], thirds[2], cwd=tree), "2/3 missing")
    _one_line_error(mpdoctor("merge", *halves, thirds[1], cwd=tree), "s2of3.json: shard 2/3, but s1of2.json")
    _one_line_error(mpdoctor("merge", *halves, "all.json", cwd=tree), "all.json: checked", "the reports overlap")
    for complete in (halves, thirds):
        merged = mpdoctor("merge", "--format", "json", *complete, cwd=tree)
        assert merged.returncode == 1, merged.stderr
        assert json.loads(merged.stdout) == json.loads((tree / "all.json").read_text())


def test_R14_unsharded_reports_of_disjoint_files_still_merge(tree):
    _report(tree, "a.json", files=("m0.py", "m1.py"))
    _report(tree, "b.json", files=("m2.py",))
    merged = mpdoctor("merge", "--format", "json", "a.json", "b.json", cwd=tree)
    summary = json.loads(merged.stdout)["summary"]
    assert merged.returncode == 1 and summary["files"] == 3 and summary["total"] == 3


# ------------------------------------------------------------------------- 15: nothing read outside the checkout


def test_R15_merge_reads_only_python_files_under_the_current_directory(tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "m.py").write_text(MODEL)
    outside = tmp_path / "outside.py"
    outside.write_text("x = 1\nSECRET = 'outside-secret'\n")
    (checkout / "creds.txt").write_text("line one\nSECRET=inside-secret\n")
    (checkout / "escape.py").symlink_to(outside)  # a Python name in the checkout, but a file outside it
    data = _report(checkout, "a.json")
    legit = dict(data["diagnostics"][0])
    forged = [
        dict(legit, path=str(outside), line=2),
        dict(legit, path="../outside.py", line=2),
        dict(legit, path="escape.py", line=2),
        dict(legit, path=str(checkout / "creds.txt"), line=2),
        dict(legit, path="creds.txt", line=2),
    ]
    data["diagnostics"] += forged
    (checkout / "a.json").write_text(json.dumps(data))
    for output in ("text", "html", "json"):
        result = mpdoctor("merge", "--format", output, "a.json", cwd=checkout)
        assert result.returncode == 1, result.stderr
        assert "secret" not in result.stdout
    html = mpdoctor("merge", "--format", "html", "a.json", cwd=checkout).stdout
    assert "keras.layers.Dense(3, activation=" in html  # the checked file's own line is still shown


# ---------------------------------------------------------------------------------- 16: every text output escaped


def test_R16_show_target_escapes_file_names(project):
    name = f"e{ESCAPE}\x1b[2J\u202e\n.py"
    (project / name).write_text(MODEL)
    result = mpdoctor("check", "--no-trace", "--show-target", ".", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    assert "e\\x1b]0;PWNED\\x07\\x1b[2J\\u202e\\n.py" in result.stdout.splitlines()


def test_R16_merge_baseline_error_is_escaped(project):
    _report(project)
    result = mpdoctor("merge", "--baseline", f"x{ESCAPE}\n.json", "r.json", cwd=project)
    _one_line_error(result, "x\\x1b]0;PWNED\\x07\\n.json")
    assert "\x1b" not in result.stderr


def test_R16_plan_escapes_layer_names_in_its_text_report(tmp_path, tensorflow):
    forged_name = "o\\x1b]0;PWNED\\x07\\x1b[2J\\nm.py:9: forged"  # as Python source: the escapes are in the name
    (tmp_path / "layer.py").write_text(
        "import keras\n"
        'keras.mixed_precision.set_global_policy("mixed_float16")\n'
        "inp = keras.Input((4,))\n"
        f'out = keras.layers.Dense(3, activation="softmax", name="{forged_name}")(inp)\n'
        "model = keras.Model(inp, out)\n"
    )
    result = mpdoctor("plan", "layer.py", cwd=tmp_path, subprocess_run=True)
    assert result.returncode in (0, 1), result.stderr
    output = result.stdout + result.stderr
    assert "\x1b" not in output
    assert not any(line.startswith("m.py:9: forged") for line in output.splitlines())
    assert "o\\x1b]0;PWNED\\x07\\x1b[2J\\nm.py:9: forged" in result.stdout


def test_R16_merge_escapes_what_a_forged_report_says_in_its_text_output(project):
    data = _report(project)
    target = data["files"][0]["target"]
    target["tensorflow"].update(range=f"2.12{ESCAPE}\n", releases=["2.12"], source="declared")
    target.update(differs_from_installed=True)
    target["installed"]["tensorflow"] = "2.21"  # as where TensorFlow is installed (the no-TF stage has none)
    data["errors"].append({"path": f"x{ESCAPE}.py", "message": "bad\nm.py:1:1: forged", "kind": "io"})
    (project / "r.json").write_text(json.dumps(data))
    result = mpdoctor("merge", "r.json", cwd=project)
    assert result.returncode == 2, result.stderr  # the report holds an error
    assert "\x1b" not in result.stdout + result.stderr
    assert "Target: TensorFlow 2.12\\x1b]0;PWNED\\x07\\n" in result.stdout
    assert "x\\x1b]0;PWNED\\x07.py: bad\\nm.py:1:1: forged" in result.stderr


# ------------------------------------------------------------------------ merge under random use (issue 32, Done)

_GOOD: dict[str, str] = {}


def _good_reports() -> dict[str, str]:
    """A real report, and the two shards of a 1/2 split, of the property test's folder (made once)."""
    if not _GOOD:
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch)
            make_folder(root)
            for name, args in (("good.json", ()), ("s1.json", ("--shard", "1/2")), ("s2.json", ("--shard", "2/2"))):
                files = ("model.py", "sub", "broken.py", "note.ipynb")  # findings, a syntax error, a notebook
                result = mpdoctor("check", "--no-trace", "--format", "json", "-o", name, *args, *files, cwd=root)
                assert result.returncode in (0, 1, 2) and (root / name).is_file(), result.stderr
                _GOOD[name] = (root / name).read_text()
    return _GOOD


def _forged(draw: st.DrawFn) -> str:
    """The good report with one value anywhere in it replaced by a hostile one."""
    data = json.loads(_good_reports()["good.json"])
    spots: list[tuple[object, object]] = []

    def walk(node: object) -> None:
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in children:
            spots.append((node, key))
            walk(child)

    walk(data)
    container, key = draw(st.sampled_from(spots))
    container[key] = draw(  # type: ignore[index]
        st.sampled_from(
            [None, -1, 0, 10**30, 1.5, "", "x\x1b]0;X\x07\n", [], {}, [1], {"a": 1}, True, "MP401", OUTSIDE]
        )
    )
    return json.dumps(data)


OUTSIDE = "../outside/secret.py"
REPORTS = ["good.json", "s1.json", "s2.json", "forged.json", "fifo.py", "zero.py", "dir.py", "missing.json"]
REPORTS += ["garbage.json", "baseline.json", "model.py", "loop.py", "/dev/null"]


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_merge_random_command_lines_exit_0_1_or_2_and_never_touch_an_input(data):
    base = Path(tempfile.mkdtemp(prefix="mpdoctor-property-"))
    try:
        folder, outside = base / "work", base / "outside"
        folder.mkdir()
        outside.mkdir()
        (outside / "secret.py").write_text("SECRET = 'token-7f3a'\n" * 50)  # what a forged path may name
        sockets = make_folder(folder)
        for name, text in _good_reports().items():
            (folder / name).write_text(text)
        (folder / "forged.json").write_text(data.draw(st.composite(_forged)()))
        reports = data.draw(st.lists(st.sampled_from(REPORTS), min_size=1, max_size=4))
        flags = data.draw(
            st.lists(
                st.sampled_from(
                    [
                        *(["--format", f] for f in ("text", "json", "html", "sarif", "junit", "github", "gitlab")),
                        *(["-o", o] for o in ("out.txt", "good.json", "s1.json", "fifo.py", "dir.py", "/dev/null")),
                        *(["--html", o] for o in ("out.html", "forged.json", "zero.py")),
                        *(["--baseline", b] for b in ("baseline.json", "garbage.json", "fifo.py", "missing.json")),
                        ["--exit-zero"],
                        ["--statistics"],
                        ["-q"],
                        ["--fail-on", "info"],
                    ]
                ),
                max_size=4,
            )
        )
        argv = ["merge", *(arg for flag in flags for arg in flag), *reports]
        inputs = {name: (folder / name).read_bytes() for name in set(reports) if (folder / name).is_file()}
        before_outside = state(outside)
        try:
            code, stdout, stderr = run_in(folder, argv)
        finally:
            for server in sockets:
                server.close()
        assert code in (0, 1, 2), (argv, code, stderr)
        assert "Traceback" not in stderr and "internal error" not in stderr, (argv, stderr)
        assert "\x1b" not in stderr and "token-7f3a" not in stdout, argv
        assert state(outside) == before_outside, argv
        assert {name: (folder / name).read_bytes() for name in inputs} == inputs, argv  # an input is never written
    finally:
        shutil.rmtree(base, ignore_errors=True)
