"""`check --fix` / `--diff` without the trace pass: fixture pairs tests/fixes/<CODE>/<name>.in.py -> .out.py (both
Keras versions), idempotence, parse checks, atomic writes and files changed behind mpdoctor's back."""

from __future__ import annotations

import ast
import os
import re
import stat
from pathlib import Path

import pytest

from mpdoctor.cli import main
from mpdoctor.config import Config
from mpdoctor.engine import check_source
from mpdoctor.fix import run as fix_run
from mpdoctor.fix.files import fix_file
from mpdoctor.fix.results import RE_TRACED, VERIFIED
from mpdoctor.fix.rounds import line_mapper, plan_fixes
from mpdoctor.fix.verify import verification_problems

FIXES = Path(__file__).parent / "fixes"
PAIRS = sorted(FIXES.glob("MP*/*.in.py"))


def _options(path: Path) -> list[str]:
    match = re.search(r"# fix-options:(.*)", path.read_text(encoding="utf-8"))
    return match.group(1).split() if match else []


def _fix(tmp_path: Path, name: str, text: str, *options: str, capsys=None) -> tuple[int, str]:
    target = tmp_path / name
    target.write_text(text, encoding="utf-8")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        code = main(["check", "--fix", "--no-trace", *options, name])
    finally:
        os.chdir(cwd)
    return code, target.read_text(encoding="utf-8")


def test_every_pair_has_an_expected_output_and_both_keras_versions_are_covered():
    assert PAIRS
    for source in PAIRS:
        assert source.with_name(source.name.replace(".in.py", ".out.py")).is_file(), source
    for code_dir in sorted(p for p in FIXES.iterdir() if p.is_dir()):
        names = [p.name for p in code_dir.glob("*.in.py")]
        assert any("_keras2" in n for n in names) and any("_keras3" in n for n in names), code_dir.name


@pytest.mark.parametrize("source", PAIRS, ids=lambda p: f"{p.parent.name}/{p.name[:-6]}")
def test_fix_gives_the_expected_output_parses_and_is_idempotent(source, tmp_path, capsys, pinned_target):
    code = source.parent.name
    options = _options(source)
    name = source.name.replace(".in.py", ".py")
    _, fixed = _fix(tmp_path, name, source.read_text(encoding="utf-8"), *options)
    expected = source.with_name(source.name.replace(".in.py", ".out.py")).read_text(encoding="utf-8")
    assert fixed == expected
    ast.parse(fixed)
    out = capsys.readouterr().out
    assert "unverified (no trace pass)" in out and "fixed," in out

    config = Config()
    if "--keras-version" in options:
        config.keras_version = int(options[options.index("--keras-version") + 1])
    diagnostics, error = check_source(fixed, name, config, path=str(tmp_path / name))
    assert error is None
    assert not [d for d in diagnostics if d.code == code and d.fix is not None], "the fix left its own finding"

    again = tmp_path / name
    before = again.stat().st_mtime_ns
    _, refixed = _fix(tmp_path, name, fixed, *options)
    assert refixed == fixed  # idempotent: a second --fix changes nothing
    assert "0 problems fixed" in capsys.readouterr().out
    assert again.read_text(encoding="utf-8") == fixed and before <= again.stat().st_mtime_ns


def test_unsafe_fixes_need_the_flag(tmp_path, capsys, pinned_target):
    source = FIXES / "MP501" / "custom_loop_keras3.in.py"
    text = source.read_text(encoding="utf-8")
    code, unchanged = _fix(tmp_path, "loop.py", text)
    assert unchanged == text and code == 1
    out = capsys.readouterr().out
    assert "0 problems fixed" in out and "1 fixable with --unsafe-fixes." in out
    assert "MP501 " in out and "[*]" not in out  # [*] marks what --fix itself would fix
    _, fixed = _fix(tmp_path, "loop.py", text, "--unsafe-fixes")
    assert "LossScaleOptimizer(" in fixed and fixed != text


SEED = """\
import os
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf
import tensorflow_hub as hub

tf.keras.mixed_precision.set_global_policy("mixed_float16")
model = tf.keras.Sequential([
    tf.keras.layers.InputLayer(input_shape=(3,)),
    hub.KerasLayer("/models/feature_vector"),  # a float32-only SavedModel
    tf.keras.layers.Dense(2, activation="softmax"),
])
"""


def test_diff_prints_unified_diffs_and_writes_nothing(tmp_path, capsys, monkeypatch):
    target = tmp_path / "seed.py"
    target.write_text(SEED)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--diff", "--no-trace", "--unsafe-fixes", "seed.py"]) == 1
    captured = capsys.readouterr()
    assert target.read_text() == SEED
    assert captured.out.startswith("--- a/seed.py\n+++ b/seed.py\n@@")
    assert (
        '+    hub.KerasLayer("/models/feature_vector", dtype="float32"),  # a float32-only SavedModel' in captured.out
    )
    assert '+    tf.keras.layers.Dense(2, activation="softmax", dtype="float32"),' in captured.out
    assert "Would fix 2 problems." in captured.err

    target.write_text(
        SEED.replace('"/models/feature_vector"', '"/models/feature_vector", dtype="float32"').replace(
            'activation="softmax"', 'activation="softmax", dtype="float32"'
        )
    )
    assert main(["check", "--diff", "--no-trace", "--unsafe-fixes", "seed.py"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "No fixes available." in captured.err


def test_diff_names_a_file_outside_the_current_directory_as_git_does(tmp_path, capsys, monkeypatch):
    target = tmp_path / "models" / "seed.py"
    target.parent.mkdir()
    target.write_text(SEED)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["check", "--diff", "--no-trace", "--unsafe-fixes", str(target)]) == 1  # an absolute path, shown so
    name = str(target).lstrip("/")
    assert capsys.readouterr().out.startswith(f"--- a/{name}\n+++ b/{name}\n@@")  # a/tmp/..., not a//tmp/...


def test_json_after_fix_carries_applicability_and_what_was_fixed(tmp_path, capsys, monkeypatch):
    import json

    (tmp_path / "seed.py").write_text(SEED.replace("])\n", "])\nmodel.compile(optimizer='adam')\n"))
    monkeypatch.chdir(tmp_path)
    main(["check", "--no-trace", "--format", "json", "seed.py"])
    before = json.loads(capsys.readouterr().out)
    fixes = [d["fix"] for d in before["diagnostics"] if d["fix"]]
    assert fixes and all(f["applicability"] in ("safe", "unsafe") and f["edits"] for f in fixes)
    assert "fixes" not in before

    main(["check", "--fix", "--no-trace", "--unsafe-fixes", "--format", "json", "seed.py"])
    after = json.loads(capsys.readouterr().out)
    [result] = after["fixes"]
    assert result["written"] and result["verification"] == "unverified (no trace pass)"
    assert sorted(a["code"] for a in result["applied"]) == ["MP201", "MP401"]
    assert after["summary"]["fixed"] == 2
    assert not [d for d in after["diagnostics"] if d["code"] in ("MP201", "MP401")]


def test_a_failed_write_leaves_the_original_intact_and_no_temporary_file(tmp_path, monkeypatch, capsys):
    target = tmp_path / "seed.py"
    target.write_text(SEED)
    target.chmod(0o640)

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--fix", "--no-trace", "--unsafe-fixes", "seed.py"]) == 1
    out = capsys.readouterr().out
    assert target.read_text() == SEED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seed.py"]
    assert "fix not applied" in out and "No space left on device" in out and "0 problems fixed" in out

    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    main(["check", "--fix", "--no-trace", "--unsafe-fixes", "seed.py"])
    assert 'dtype="float32"' in target.read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the mode survives the rename
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seed.py"]


def test_a_file_changed_since_it_was_analysed_is_not_touched(tmp_path, monkeypatch, capsys):
    target = tmp_path / "seed.py"
    target.write_text(SEED)
    edited = SEED + "print('edited meanwhile')\n"
    planned = fix_run.fix_file

    def edit_behind_our_back(*args, **kwargs):
        result = planned(*args, **kwargs)
        target.write_text(edited)
        return result

    monkeypatch.setattr(fix_run, "fix_file", edit_behind_our_back)
    monkeypatch.chdir(tmp_path)
    main(["check", "--fix", "--no-trace", "--unsafe-fixes", "seed.py"])
    out = capsys.readouterr().out
    assert target.read_text() == edited
    assert "changed since it was analysed; not touched" in out


def test_a_fix_whose_result_does_not_parse_is_refused(tmp_path):
    from mpdoctor.diagnostics import Diagnostic, Edit, Fix, Location, Severity

    text = "x = 1\ny = 2\n"
    good = Diagnostic(
        "MP102", "m", Location("m.py", 1, 5), Severity.WARNING, fix=Fix("ok", (Edit("m.py", 1, 5, 1, 6, "3"),))
    )
    bad = Diagnostic(
        "MP403", "m", Location("m.py", 2, 5), Severity.ERROR, fix=Fix("broken", (Edit("m.py", 2, 5, 2, 6, "(("),))
    )
    fixed, applied, refused, _ = plan_fixes(text, [good, bad], lambda t: [], unsafe=True)
    assert fixed == "x = 3\ny = 2\n"
    assert [d.code for d, _ in applied] == ["MP102"]
    assert [(d.code, reason) for d, reason in refused] == [("MP403", "the fixed source would not parse")]


def test_conflicting_fixes_wait_for_the_next_round():
    from mpdoctor.diagnostics import Diagnostic, Edit, Fix, Location, Severity

    rounds = []

    def recheck(text):
        rounds.append(text)
        if "dtype" in text and "name" not in text:  # the second fix, recomputed against the new text
            return [
                Diagnostic(
                    "MP401",
                    "m",
                    Location("m.py", 1, 1),
                    Severity.ERROR,
                    fix=Fix("b", (Edit("m.py", 1, len(text.rstrip()), 1, len(text.rstrip()), ", name='out'"),)),
                )
            ]
        return []

    text = "f(x)\n"
    first = Diagnostic(
        "MP201",
        "m",
        Location("m.py", 1, 1),
        Severity.ERROR,
        fix=Fix("a", (Edit("m.py", 1, 4, 1, 4, ", dtype='float32'"),)),
    )
    second = Diagnostic(
        "MP401", "m", Location("m.py", 1, 1), Severity.ERROR, fix=Fix("b", (Edit("m.py", 1, 4, 1, 4, ", name='out'"),))
    )
    fixed, applied, refused, _ = plan_fixes(text, [first, second], recheck, unsafe=False)
    assert fixed == "f(x, dtype='float32', name='out')\n"
    assert [d.code for d, _ in applied] == ["MP201", "MP401"] and not refused and len(rounds) == 2


def test_line_mapper_follows_inserted_lines():
    old = "a\nb\nc\n"
    new = "a\nimport x\n\nclass B: pass\nb\nc2\n"
    mapped = line_mapper(old, new)
    assert list(mapped(1)) == [1] and list(mapped(2)) == [5] and 6 in mapped(3)


def test_fix_keeps_crlf_line_endings_and_encoding_cookie(tmp_path, monkeypatch):
    text = "# -*- coding: latin-1 -*-\r\n# caf\xe9\r\n" + SEED.replace("\n", "\r\n")
    target = tmp_path / "seed.py"
    target.write_bytes(text.encode("latin-1"))
    monkeypatch.chdir(tmp_path)
    main(["check", "--fix", "--no-trace", "--unsafe-fixes", "seed.py"])
    data = target.read_bytes()
    assert b"caf\xe9" in data and b'dtype="float32"),  # a float32-only SavedModel\r\n' in data
    assert b"\n" not in data.replace(b"\r\n", b"")


def test_verification_wants_the_fixed_finding_gone_and_no_new_error():
    from mpdoctor.diagnostics import Diagnostic, Location, Severity

    def diag(code, line, severity=Severity.ERROR):
        return Diagnostic(code, "m", Location("m.py", line, 1), severity, passes=("trace",))

    original = "import x\nlayer = X()\nrun()\n"
    fixed = "import x\nimport y\nlayer = X(dtype='float32')\nrun()\n"
    fixed_finding = diag("MP201", 2)
    crash = diag("MP001", 3)
    check = verification_problems
    assert check(original, fixed, [fixed_finding], [(fixed_finding, original)], []) == []
    assert check(original, fixed, [fixed_finding], [(fixed_finding, original)], [diag("MP201", 3)]) == [
        "MP201 is still reported after the fix (line 3)"
    ]
    assert check(original, fixed, [fixed_finding], [(fixed_finding, original)], [diag("MP001", 4)]) == [
        "new MP001 at line 4: m"
    ]
    # the same crash before and after (line 3 became line 4) is not new; a new warning is not an error
    assert (
        check(
            original,
            fixed,
            [fixed_finding, crash],
            [(fixed_finding, original)],
            [diag("MP001", 4), diag("MP601", 1, Severity.INFO)],
        )
        == []
    )


def test_diff_says_how_many_unsafe_fixes_it_left_out(tmp_path, capsys, monkeypatch, pinned_target):
    source = (FIXES / "MP501" / "custom_loop_keras3.in.py").read_text(encoding="utf-8")
    (tmp_path / "loop.py").write_text(source, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--diff", "--no-trace", "loop.py"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "No fixes available. 1 more with --unsafe-fixes." in captured.err
    assert main(["check", "--diff", "--no-trace", "--unsafe-fixes", "loop.py"]) == 1
    captured = capsys.readouterr()
    assert "+optimizer = keras.mixed_precision.LossScaleOptimizer(" in captured.out
    assert "Would fix 1 problem." in captured.err
    assert (tmp_path / "loop.py").read_text(encoding="utf-8") == source


def test_a_fix_whose_finding_comes_back_is_not_applied_again():
    from mpdoctor.diagnostics import Diagnostic, Edit, Fix, Location, Severity

    def wrap(text):  # a fix that changes the text but never removes its finding
        line = text.splitlines()[1]
        return [
            Diagnostic(
                "MP406",
                "m",
                Location("m.py", 2, 5),
                Severity.ERROR,
                fix=Fix("cast it", (Edit("m.py", 2, 5, 2, len(line) + 1, f"cast({line[4:]})"),)),
            )
        ]

    text = "import x\ny = f(1)\n"
    fixed, applied, refused, _ = plan_fixes(text, wrap(text), wrap, unsafe=False)
    assert fixed == "import x\ny = cast(f(1))\n"
    assert len(applied) == 1 and [reason for _, reason in refused] == ["the finding is still reported after its fix"]


def test_two_findings_of_one_kind_on_a_line_are_both_fixed_across_rounds():
    from mpdoctor.diagnostics import Diagnostic, Edit, Fix, Location, Severity

    def findings(text):  # one per missing keyword; both fixes insert before the `)`: they clash
        end = text.index(")") + 1
        return [
            Diagnostic(
                "MP406",
                "m",
                Location("m.py", 1, 1),
                Severity.ERROR,
                fix=Fix("add a keyword", (Edit("m.py", 1, end, 1, end, f", {kw}"),)),
            )
            for kw in ("a=1", "b=2")
            if kw not in text
        ]

    text = "f(x)\n"
    fixed, applied, refused, _ = plan_fixes(text, findings(text), findings, unsafe=False)
    assert fixed == "f(x, a=1, b=2)\n" and len(applied) == 2 and not refused


def test_verification_drops_only_the_fix_the_rerun_still_reports(tmp_path, monkeypatch):
    from mpdoctor import engine
    from mpdoctor.diagnostics import Diagnostic, Location, Severity

    real = engine.check_source
    runs = []

    def traced(text, shown, config, path=None, trace=None, traces=None, run_from=None, project=None):
        found, error = real(text, shown, config, path=path)
        if trace is not None and trace.enabled:  # a stand-in trace: the hub layer still fails whatever its dtype
            runs.append(text)
            assert run_from and Path(run_from).read_text() == text and Path(run_from).parent != tmp_path
            found = [d for d in found if d.code != "MP201"] + [
                Diagnostic("MP201", "still fails", Location(shown, 9, 5), Severity.ERROR, passes=("trace",))
            ]
        return found, error

    monkeypatch.setattr(engine, "check_source", traced)
    target = tmp_path / "seed.py"
    target.write_text(SEED)
    diagnostics, _ = real(SEED, "seed.py", Config(), path=str(target))
    result = fix_file(target, "seed.py", SEED, diagnostics, Config(), engine.TraceOptions(enabled=True), unsafe=True)
    assert [d.code for d in result.applied] == ["MP401"] and result.verification == "verified"
    assert [(d.code, reason) for d, reason in result.not_applied] == [
        ("MP201", "re-tracing the fixed file: MP201 is still reported after the fix (line 9)")
    ]
    assert 'hub.KerasLayer("/models/feature_vector"),' in result.fixed
    assert 'activation="softmax", dtype="float32")' in result.fixed
    assert len(runs) == 2  # the whole round, then the round without the fix that did not work
    assert target.read_text() == SEED  # planning never writes


REFUSED = sorted(FIXES.glob("MP*/*.refused.py"))


@pytest.mark.parametrize("source", REFUSED, ids=lambda p: f"{p.parent.name}/{p.name[:-11]}")
def test_a_fix_that_would_be_wrong_is_refused_with_its_reason(source, tmp_path, capsys, pinned_target):
    """Issue 19: loss-scaling fixes whose gradients meet something other than the LossScaleOptimizer's apply (a clip,
    an accumulation, the inner optimizer, an unknown tape wrapper) are not made; the finding says why."""
    text = source.read_text(encoding="utf-8")
    reason = re.search(r"# fix-refused: (.*)", text).group(1).strip()
    options = _options(source)
    _, fixed = _fix(tmp_path, "step.py", text, "--unsafe-fixes", *options)
    assert fixed == text
    out = capsys.readouterr().out
    assert "0 problems fixed" in out
    assert f"not fixed automatically: {reason}" in " ".join(out.split())
    config = Config()
    if "--target-tensorflow" in options:
        config.target_tensorflow = options[options.index("--target-tensorflow") + 1]
    diagnostics, _ = check_source(text, "step.py", config, path=str(source))  # judged as the fixtures are
    assert [d for d in diagnostics if d.code == source.parent.name and "not fixed automatically" in d.message]
    assert not [d for d in diagnostics if d.code == source.parent.name and d.fix is not None]


def test_a_static_savedmodel_fix_says_the_layer_runs_in_float32_and_is_unsafe(tmp_path, capsys, monkeypatch):
    """Issue 19: dtype="float32" on a SavedModel layer the static pass cannot read may turn mixed precision off for
    the model's main compute (a whole encoder): it says so and waits for --unsafe-fixes."""
    (tmp_path / "seed.py").write_text(SEED)
    monkeypatch.chdir(tmp_path)
    diagnostics, _ = check_source(SEED, "seed.py", Config())
    [mp201] = [d for d in diagnostics if d.code == "MP201"]
    assert mp201.fix.applicability == "unsafe"
    assert "this layer will run in float32: all it computes loses mixed precision" in mp201.fix.description
    main(["check", "--diff", "--no-trace", "seed.py"])
    captured = capsys.readouterr()
    assert 'hub.KerasLayer("/models/feature_vector", dtype="float32")' not in captured.out
    assert "Would fix 1 problem. 1 more with --unsafe-fixes." in captured.err


def test_a_re_traced_loss_scaling_fix_is_not_called_verified(tmp_path, monkeypatch, pinned_target):
    """Issue 19: re-tracing shows the fixed file builds and the finding is gone, not that the training step still
    moves the weights the right way: a loss-scaling fix is reported as re-traced, not "verified"."""
    from mpdoctor import engine

    real = engine.check_source

    def traced(text, shown, config, path=None, trace=None, traces=None, run_from=None, project=None):
        return real(text, shown, config, path=path)  # a stand-in trace that finds what the static pass finds

    monkeypatch.setattr(engine, "check_source", traced)
    text = (FIXES / "MP501" / "custom_loop_keras3.in.py").read_text(encoding="utf-8")
    target = tmp_path / "loop.py"
    target.write_text(text)
    diagnostics, _ = real(text, "loop.py", Config(), path=str(target))
    result = fix_file(target, "loop.py", text, diagnostics, Config(), engine.TraceOptions(enabled=True), unsafe=True)
    assert [d.code for d in result.applied] == ["MP501"]
    # The stand-in trace ran no training step: nothing is claimed about the update either way.
    assert result.verification.startswith(RE_TRACED) and result.verification != VERIFIED
    assert "verified" not in result.verification
