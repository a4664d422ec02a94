"""`mpdoctor inspect` and `mpdoctor convert-checkpoint`: output, exit codes, and the bad-input suite (one clear line
naming the file and the problem, exit 2, no traceback, nothing written)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

np = pytest.importorskip("numpy")  # comes with TensorFlow; without it every test here is moot

from mpdoctor.cli.artifacts import add_convert_parser, add_inspect_parser  # noqa: E402


def _wired() -> bool:
    from mpdoctor.cli import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {"inspect", "convert-checkpoint"} <= set(action.choices)
    return False


def run_cli(argv, capfd):
    """Through mpdoctor.cli.main once the subcommands are wired into it, else through a parser built the same way."""
    capfd.readouterr()
    if _wired():
        from mpdoctor.cli import main

        code = main([str(a) for a in argv])
    else:
        from mpdoctor.cli import Parser

        parser = Parser(prog="mpdoctor")
        sub = parser.add_subparsers(dest="command", parser_class=Parser)
        add_inspect_parser(sub)
        add_convert_parser(sub)
        try:
            args = parser.parse_args([str(a) for a in argv])
            code = args.handler(args)
        except SystemExit as exc:
            code = exc.code
    out, err = capfd.readouterr()
    return code, out, err


HARNESS = textwrap.dedent("""
    import sys
    from mpdoctor.cli import Parser, build_parser, main
    from mpdoctor.cli.artifacts import add_convert_parser, add_inspect_parser
    import argparse
    wired = any(isinstance(a, argparse._SubParsersAction) and "inspect" in a.choices for a in build_parser()._actions)
    if wired:
        sys.exit(main(sys.argv[1:]))
    parser = Parser(prog="mpdoctor")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    add_inspect_parser(sub)
    add_convert_parser(sub)
    args = parser.parse_args(sys.argv[1:])
    sys.exit(args.handler(args))
""")


def run_process(argv, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "MPDOCTOR_DEBUG")}
    return subprocess.run(
        [sys.executable, "-c", HARNESS, *map(str, argv)], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def h5py():
    return pytest.importorskip("h5py")


@pytest.fixture(scope="module")
def ckpt(tf, tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    weights = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    weights[0, 0] = 1e5
    checkpoint = tf.train.Checkpoint(w=tf.Variable(weights), step=tf.Variable(3, dtype=tf.int64))
    return checkpoint.save(str(root / "train" / "ckpt"))


def listing(directory) -> list[str]:
    return sorted(os.path.relpath(os.path.join(r, f), directory) for r, _, fs in os.walk(directory) for f in fs)


# --------------------------------------------------------------------------------------------------------------------
# inspect


def test_inspect_text_lists_variables_and_ends_with_a_verdict(ckpt, capfd):
    code, out, err = run_cli(["inspect", ckpt], capfd)
    assert code == 0, err
    assert "TF2 object-based checkpoint" in out
    row = next(line for line in out.splitlines() if line.startswith("w/.ATTRIBUTES"))
    assert row.split() == ["w/.ATTRIBUTES/VARIABLE_VALUE", "float32", "[3,", "4]", "w"]
    lines = out.strip().splitlines()
    assert lines[-1].startswith("verdict: 3 variables (float32 1, int64 2)")


def test_inspect_float16_audit_finds_overflow_exit_1(ckpt, capfd):
    code, out, err = run_cli(["inspect", ckpt, "--dtype", "float16"], capfd)
    assert code == 1, err
    assert "float16 range audit: 1 float variable to cast (12 values)" in out
    row = [line for line in out.splitlines() if line.startswith("w/.ATTRIBUTES")][-1]  # the audit table's row
    assert row.split()[2:] == ["12", "1", "1e+05", "0", "0", "0.000%", "overflow"]
    assert out.strip().splitlines()[-1] == (
        "verdict: NOT safe for float16: 1 variable overflow (1 value above 65504 become inf)"
    )


def test_inspect_bfloat16_is_safe_and_json(ckpt, capfd):
    code, out, err = run_cli(["inspect", ckpt, "--dtype", "bfloat16", "--format", "json"], capfd)
    assert code == 0, err
    document = json.loads(out)
    assert document["version"] == 1 and document["kind"] == "checkpoint"
    assert document["checkpoint"]["format"] == "tf2-object"
    assert {v["key"] for v in document["checkpoint"]["variables"]} == {
        "w/.ATTRIBUTES/VARIABLE_VALUE",
        "step/.ATTRIBUTES/VARIABLE_VALUE",
        "save_counter/.ATTRIBUTES/VARIABLE_VALUE",
    }
    audit = document["audit"]
    assert audit["safe"] is True and audit["target_dtype"] == "bfloat16"
    assert 0 < audit["summary"]["max_relative_error"] <= 2**-8
    assert document["verdict"].startswith("safe for bfloat16")


def test_inspect_savedmodel_signatures_and_variable_audit(tf, tmp_path, capfd):
    module = tf.Module()
    module.w = tf.Variable(tf.ones([3, 4]) * 7e4)
    module.__call__ = tf.function(
        lambda x: tf.matmul(x, module.w), input_signature=[tf.TensorSpec([None, 3], tf.float32)]
    )
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.__call__})
    code, out, err = run_cli(["inspect", tmp_path / "sm"], capfd)
    assert code == 0, err
    assert "serving_default" in out and "float32 [?, 3]" in out
    assert out.strip().splitlines()[-1].startswith("verdict: accepts float32 inputs only")
    code, out, err = run_cli(["inspect", tmp_path / "sm", "--dtype", "float16", "--format", "json"], capfd)
    assert code == 1, err
    document = json.loads(out)
    assert document["kind"] == "savedmodel"
    assert document["savedmodel"]["accepted_input_dtypes"] == ["float32"]
    assert document["audit"]["summary"]["overflow_values"] == 12


EXPORT = """\
import sys
{keras}
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])
model.export(sys.argv[1])
"""


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_inspect_lists_each_variable_of_a_keras_export_once(tf, tmp_path, capfd, legacy):
    script = tmp_path / "export.py"
    script.write_text(EXPORT.format(keras="import tf_keras as keras" if legacy else "import keras"))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1" if legacy else "0")
    subprocess.run([sys.executable, str(script), str(tmp_path / "exported")], check=True, env=env, timeout=300)
    code, out, err = run_cli(["inspect", tmp_path / "exported", "--format", "json"], capfd)
    assert code == 0, err
    listed = json.loads(out)["checkpoint"]
    assert listed["mirrored"] == (0 if legacy else 4)
    assert sorted(v["object_path"] for v in listed["variables"]) == [f"variables/{i}" for i in range(4)]
    assert listed["total_bytes"] == (4 * 3 + 3 + 3 * 2 + 2) * 4
    code, out, err = run_cli(["inspect", tmp_path / "exported"], capfd)
    assert "4 variables, 92 B: float32 4" in out and "_all_variables/0" not in out
    # Keras 3 stores the variables twice (tf_keras once): said, not listed.
    assert ("repeat variables/ and are listed once" in out) is not legacy
    # The checkpoint itself keeps every entry: a conversion converts all of them.
    code, out, err = run_cli(
        ["convert-checkpoint", tmp_path / "exported/variables/variables", tmp_path / "half", "--dtype", "float16"],
        capfd,
    )
    assert code == 0, err
    converted = tf.train.load_checkpoint(str(tmp_path / "half")).get_variable_to_dtype_map()
    assert len([k for k in converted if k.endswith("VARIABLE_VALUE")]) == (4 if legacy else 8)


def test_lists_named_like_an_export_that_differ_are_both_listed(tf, tmp_path, capfd):
    checkpoint = tf.train.Checkpoint(variables=[tf.Variable(tf.ones([2]))], _all_variables=[tf.Variable(tf.ones([5]))])
    checkpoint.write(str(tmp_path / "ckpt"))
    code, out, err = run_cli(["inspect", tmp_path / "ckpt", "--format", "json"], capfd)
    assert code == 0, err
    listed = json.loads(out)
    listed = listed.get("checkpoint", listed)
    assert sorted(v["object_path"] for v in listed["variables"]) == ["_all_variables/0", "variables/0"]
    assert listed["mirrored"] == 0


# --------------------------------------------------------------------------------------------------------------------
# convert-checkpoint


def test_convert_prints_audit_writes_verifies_and_refuses_to_overwrite(ckpt, tmp_path, capfd):
    out_prefix = tmp_path / "half"
    code, out, err = run_cli(["convert-checkpoint", ckpt, out_prefix, "--dtype", "float16", "--allow-inf"], capfd)
    assert code == 0, err
    assert err == ""
    assert "cast 1 float entry to float16, copied 3 entries untouched" in out
    assert "verdict: NOT safe for float16: 1 variable overflow" in out
    assert "warning: 1 value became inf in the output" in out
    assert "verified by reading it back" in out
    assert listing(tmp_path) == ["half.data-00000-of-00001", "half.index"]

    before = {f: (tmp_path / f).read_bytes() for f in listing(tmp_path)}
    code, out, err = run_cli(["convert-checkpoint", ckpt, out_prefix, "--dtype", "bfloat16"], capfd)
    assert code == 2 and out == ""
    assert err == f"mpdoctor: error: {out_prefix}: already exists (pass --force to overwrite it)\n"
    assert {f: (tmp_path / f).read_bytes() for f in listing(tmp_path)} == before

    code, out, err = run_cli(["convert-checkpoint", ckpt, out_prefix, "--dtype", "bfloat16", "--force"], capfd)
    assert code == 0, err
    code, out, _ = run_cli(["inspect", out_prefix, "--format", "json"], capfd)
    assert json.loads(out)["checkpoint"]["dtypes"] == {"bfloat16": 1, "int64": 2}


def test_convert_only_matching_nothing_is_an_error(ckpt, tmp_path, capfd):
    code, out, err = run_cli(
        ["convert-checkpoint", ckpt, tmp_path / "x", "--dtype", "float16", "--only", "^nope"], capfd
    )
    assert code == 2 and out == ""
    assert err.startswith("mpdoctor: error: --only: '^nope' matches no float entry")
    assert listing(tmp_path) == []


def test_convert_json(ckpt, tmp_path, capfd):
    code, out, err = run_cli(
        ["convert-checkpoint", ckpt, tmp_path / "j", "--dtype", "float16", "--allow-inf", "--format", "json"], capfd
    )
    assert code == 0, err
    conversion = json.loads(out)["conversion"]
    assert conversion["verified"] is True and conversion["cast"] == ["w/.ATTRIBUTES/VARIABLE_VALUE"]
    assert conversion["audit"]["summary"]["overflow_values"] == 1


# --------------------------------------------------------------------------------------------------------------------
# Bad input: one line naming the file and the problem, exit 2, no traceback, nothing written


NEEDS_TF = ("prefix with no index", "truncated data shard", "corrupt index")


def make_bad(kind, tmp_path, request):
    """Returns (path to pass, file the error must name, problem text). Only the cases that need them load the
    TensorFlow checkpoint or h5py."""
    if kind in NEEDS_TF:
        ckpt = request.getfixturevalue("ckpt")
        src_dir, base = os.path.dirname(ckpt), os.path.basename(ckpt)
    if "h5" in kind:
        h5py = request.getfixturevalue("h5py")
    bad = tmp_path / "bad"
    bad.mkdir()
    if kind == "missing path":
        return bad / "nothing" / "ckpt-9", bad / "nothing" / "ckpt-9", "no such file or directory"
    if kind == "prefix with no index":
        shutil.copy(os.path.join(src_dir, base + ".data-00000-of-00001"), bad)
        return bad / base, bad / (base + ".index"), "missing: the checkpoint prefix has data shards but no index"
    if kind == "truncated data shard":
        for f in os.listdir(src_dir):
            if f.startswith(base + "."):
                shutil.copy(os.path.join(src_dir, f), bad)
        data = bad / (base + ".data-00000-of-00001")
        os.truncate(data, os.path.getsize(data) // 2)
        return bad / base, data, "truncated data shard"
    if kind == "corrupt index":
        for f in os.listdir(src_dir):
            if f.startswith(base + "."):
                shutil.copy(os.path.join(src_dir, f), bad)
        (bad / (base + ".index")).write_bytes(b"not an sstable" * 8)
        return bad / base, bad / (base + ".index"), "cannot read the checkpoint index"
    if kind == "dir that is not a checkpoint":
        (bad / "notes.txt").write_text("hello")
        return bad, bad, "not a checkpoint"
    if kind == "h5 of unknown layout":
        with h5py.File(bad / "weights.h5", "w") as f:
            f.create_dataset("foo", data=np.ones(3, np.float32))
        return bad / "weights.h5", bad / "weights.h5", "HDF5 file of unknown layout"
    if kind == "not an h5 file":
        (bad / "weights.h5").write_bytes(b"definitely not HDF5")
        return bad / "weights.h5", bad / "weights.h5", "not an HDF5 file"
    if kind == "corrupt saved_model.pb":
        (bad / "saved_model.pb").write_bytes(b"\x08\x01\x12\xff\xff\xff garbage")
        return bad, bad / "saved_model.pb", "cannot be parsed as a SavedModel"
    raise AssertionError(kind)


BAD = [
    "missing path",
    "prefix with no index",
    "truncated data shard",
    "corrupt index",
    "dir that is not a checkpoint",
    "h5 of unknown layout",
    "not an h5 file",
    "corrupt saved_model.pb",
]


@pytest.mark.parametrize("command", ["inspect", "convert"])
@pytest.mark.parametrize("kind", BAD)
def test_bad_input_one_line_exit_2_nothing_written(kind, command, request, tmp_path, capfd, monkeypatch):
    path, named, problem = make_bad(kind, tmp_path, request)
    monkeypatch.chdir(tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    before = listing(tmp_path)
    if command == "inspect":
        argv = ["inspect", path, "--dtype", "float16"]
    else:
        argv = [
            "convert-checkpoint",
            path,
            out_dir / "converted.weights.h5" if "h5" in kind else out_dir / "conv",
            "--dtype",
            "float16",
        ]
    code, out, err = run_cli(argv, capfd)
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    shown = os.path.relpath(named, tmp_path)
    if command == "convert" and kind == "corrupt saved_model.pb":
        shown, problem = os.path.relpath(path, tmp_path), "is a SavedModel, not a checkpoint"
    assert lines[0].startswith(f"mpdoctor: error: {shown}: "), (lines[0], shown)
    assert problem in lines[0]
    assert listing(tmp_path) == before  # nothing written, no temporaries left


def test_bad_input_in_a_real_process_has_no_tensorflow_noise(request, tmp_path):
    path, named, problem = make_bad("truncated data shard", tmp_path, request)
    result = run_process(["convert-checkpoint", path, tmp_path / "out", "--dtype", "float16"], tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"mpdoctor: error: {os.path.relpath(named, tmp_path)}: {problem}: ")
    assert not os.path.exists(tmp_path / "out.index")


def test_successful_conversion_in_a_real_process_prints_nothing_on_stderr(ckpt, tmp_path):
    result = run_process(["convert-checkpoint", ckpt, tmp_path / "half", "--dtype", "float16", "--allow-inf"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "verified by reading it back" in result.stdout
