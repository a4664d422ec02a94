"""Hostile input and interrupted runs (issue 15), the cases that need TensorFlow: crafted checkpoint indexes (F13),
.keras archives (F14), convert-checkpoint's overflow handling, and real trace runs for processes (F08), terminal
escapes (F07) and forged facts (F09). The rest is in test_reliability.py."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_reliability import MODEL, ROOT, alive, kill_quietly, one_line_errors, run_cli, run_main, wait_for
from trace_helpers import FIND_RESULT_PATH

tf = pytest.importorskip("tensorflow")


# --------------------------------------------------------------------------------------------- F13 checkpoint index


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _block(entries: list[tuple[bytes, bytes]]) -> bytes:
    body, restarts = bytearray(), []
    for key, value in entries:  # no prefix compression: a restart point at every entry
        restarts.append(len(body))
        body += _varint(0) + _varint(len(key)) + _varint(len(value)) + key + value
    restarts = restarts or [0]
    return bytes(body) + b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))


def write_table(path: Path, entries: list[tuple[bytes, bytes]]) -> None:
    """A LevelDB-format table as TF writes tensor bundle indexes (uncompressed blocks, masked CRC32C trailers)."""
    out = bytearray()

    def emit(contents: bytes) -> tuple[int, int]:
        offset = len(out)
        crc = _crc32c(contents + b"\0")
        masked = ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
        out.extend(contents + b"\0" + struct.pack("<I", masked))
        return offset, len(contents)

    entries = sorted(entries)
    data = emit(_block(entries))
    meta = emit(_block([]))
    index = emit(_block([(entries[-1][0] + b"\xff", _varint(data[0]) + _varint(data[1]))]))
    footer = _varint(meta[0]) + _varint(meta[1]) + _varint(index[0]) + _varint(index[1])
    out.extend(footer + b"\0" * (40 - len(footer)) + struct.pack("<Q", 0xDB4775248B80FB57))
    path.write_bytes(bytes(out))


def crafted_checkpoint(folder: Path, dims: list[int]) -> Path:
    """A real TF2 checkpoint whose variable's index entry is given the shape `dims`."""
    from tensorflow.core.protobuf import tensor_bundle_pb2

    from mpdoctor.artifacts.bundle_index import table_entries

    prefix = folder / "ckpt"
    tf.train.Checkpoint(w=tf.Variable(tf.ones([4]))).write(str(prefix))
    index = Path(str(prefix) + ".index")
    rows = []
    for key, value in table_entries(index.read_bytes()):
        if key == b"w/.ATTRIBUTES/VARIABLE_VALUE":
            entry = tensor_bundle_pb2.BundleEntryProto()
            entry.ParseFromString(value)
            del entry.shape.dim[:]
            for size in dims:
                entry.shape.dim.add(size=size)
            value = entry.SerializeToString()
        rows.append((key, value))
    write_table(index, rows)
    return prefix


@pytest.mark.parametrize(
    "dims,problem",
    [
        ([-5], "has a negative dimension"),
        ([2**40, 2**40], "holds more elements than int64 counts"),
        ([2**20, 2**20], "needs 4,398,046,511,104 bytes, the index records 16"),
        ([1] * 300, "300 dimensions (at most 254)"),
    ],
    ids=["negative", "int64-overflow", "beyond-the-shard", "too-many-dims"],
)
@pytest.mark.parametrize("command", ["inspect", "convert-checkpoint"])
def test_F13_a_crafted_index_is_a_corrupt_checkpoint_never_an_abort(tmp_path, dims, problem, command):
    crafted_checkpoint(tmp_path, dims)
    before = sorted(p.name for p in tmp_path.iterdir())
    args = [command, "ckpt"] + (["out", "--dtype", "float16"] if command == "convert-checkpoint" else [])
    result = run_cli(*args, cwd=tmp_path, timeout=180)  # an abort would be exit 134
    assert result.returncode == 2, (result.returncode, result.stderr[-500:])
    [line] = one_line_errors(result.stderr)
    assert line.startswith("mpdoctor: error: ckpt.index: corrupt checkpoint: tensor 'w/.ATTRIBUTES/VARIABLE_VALUE'")
    assert problem in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_F13_an_unmodified_checkpoint_still_reads(tmp_path):
    crafted_checkpoint(tmp_path, [4])
    result = run_cli("inspect", "ckpt", cwd=tmp_path, timeout=180)
    assert result.returncode == 0 and "w/.ATTRIBUTES/VARIABLE_VALUE  float32  [4]" in result.stdout, result.stderr


# --------------------------------------------------------------------------------------------- F14 .keras archives

h5py = pytest.importorskip("h5py")


def keras_archive(path: Path, members: dict[str, bytes], compression=zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as archive:
        archive.writestr("config.json", "{}")
        archive.writestr("metadata.json", "{}")
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_F14_a_zip_bomb_is_refused_before_anything_is_extracted(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    keras_archive(tmp_path / "bomb.keras", {"model.weights.h5": b"\0" * (64 << 20)})
    code, out, err = run_main("inspect", "bomb.keras", cwd=tmp_path)
    assert code == 2 and out == ""
    [line] = one_line_errors(err)
    assert "bomb.keras: member 'model.weights.h5' would expand" in line and "zip bomb" in line
    assert list(scratch.iterdir()) == []


def test_F14_a_member_that_is_not_hdf5_is_refused_without_extracting_it(tmp_path):
    keras_archive(tmp_path / "fake.keras", {"model.weights.h5": os.urandom(1 << 20)})
    code, _, err = run_main("inspect", "fake.keras", cwd=tmp_path)
    assert code == 2
    assert one_line_errors(err) == [
        "mpdoctor: error: fake.keras[model.weights.h5]: not an HDF5 file (bad signature): "
        "the archive is corrupt or not Keras"
    ]


@pytest.mark.parametrize("name", ["../evil.json", "/etc/evil", "assets/../../evil", "C:\\evil"])
def test_F14_path_traversal_member_names_are_refused(tmp_path, name):
    keras_archive(tmp_path / "trav.keras", {name: b"x", "model.weights.h5": b"x"})
    code, _, err = run_main("inspect", "trav.keras", cwd=tmp_path)
    assert code == 2
    [line] = one_line_errors(err)
    assert line.startswith("mpdoctor: error: trav.keras: unsafe member name") and "path traversal" in line


def test_F14_a_real_keras_archive_still_reads(tmp_path):
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.save(tmp_path / "m.keras")
    code, out, err = run_main("inspect", "m.keras", cwd=tmp_path)
    assert code == 0 and "Keras 3 archive" in out, err


# --------------------------------------------------------------------------------------------- convert-checkpoint


@pytest.fixture
def overflowing(tmp_path):
    """A TF2 checkpoint whose `w` holds 1e5 (beyond float16) and 1.0."""
    prefix = tmp_path / "src" / "ckpt"
    tf.train.Checkpoint(w=tf.Variable([1e5, 1.0, -7e4])).write(str(prefix))
    return prefix


def test_convert_refuses_to_make_inf_and_names_the_variable(overflowing, tmp_path):
    code, out, err = run_main("convert-checkpoint", overflowing, "out/deep/half", "--dtype", "float16", cwd=tmp_path)
    assert code == 1 and out == ""
    [line] = one_line_errors(err)
    assert line.startswith("mpdoctor: error: out/deep/half: not written: 2 values of 1 variable would become inf")
    assert "'w/.ATTRIBUTES/VARIABLE_VALUE'" in line and "--saturate" in line and "--allow-inf" in line
    assert not (tmp_path / "out").exists()  # the folders it would have created are gone again


def test_convert_saturate_clamps_and_creates_the_parent_folders(overflowing, tmp_path):
    code, out, err = run_main(
        "convert-checkpoint", overflowing, "out/deep/half", "--dtype", "float16", "--saturate", cwd=tmp_path
    )
    assert code == 0, err
    assert "clamped 2 values to +-65504 (--saturate)" in out
    assert "0 MiB/s" not in out and "/s); verified by reading it back" in out
    value = tf.train.load_checkpoint(str(tmp_path / "out/deep/half")).get_tensor("w/.ATTRIBUTES/VARIABLE_VALUE")
    assert value.tolist() == [65504.0, 1.0, -65504.0]


def test_convert_allow_inf_writes_inf_with_a_warning(overflowing, tmp_path):
    code, out, err = run_main(
        "convert-checkpoint", overflowing, "half", "--dtype", "float16", "--allow-inf", cwd=tmp_path
    )
    assert code == 0, err
    assert "warning: 2 values became inf in the output (--allow-inf)" in out
    value = tf.train.load_checkpoint(str(tmp_path / "half")).get_tensor("w/.ATTRIBUTES/VARIABLE_VALUE")
    assert value.tolist() == [float("inf"), 1.0, float("-inf")]


def test_convert_without_overflow_needs_no_flag(tmp_path):
    prefix = tmp_path / "ckpt"
    tf.train.Checkpoint(w=tf.Variable([1.0, 2.0])).write(str(prefix))
    code, out, err = run_main("convert-checkpoint", "ckpt", "half", "--dtype", "float16", cwd=tmp_path)
    assert code == 0 and "clamped" not in out and "became inf" not in out, err


# --------------------------------------------------------------------------------------------- trace pass, for real


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process discovery through /proc is Linux-only")
def test_F08_a_real_trace_ends_what_the_model_code_left_running(tmp_path):
    """The model code starts a sleeper in a new session and a thread that never ends: the run finishes well
    within the (long) timeout with the trace's findings, and the sleeper is gone."""
    script = tmp_path / "g.py"
    script.write_text(
        MODEL + "import subprocess, threading\n"
        "sleeper = subprocess.Popen(['sleep', '777'], start_new_session=True)\n"
        f"open({str(tmp_path / 'pid')!r}, 'w').write(str(sleeper.pid))\n"
        "threading.Thread(target=threading.Event().wait).start()  # not a daemon: keeps the child alive\n"
    )
    result = run_cli(
        "check",
        "--trace",
        "--no-numerics",
        "--format",
        "json",
        "--trace-timeout",
        "900",
        "g.py",
        cwd=tmp_path,
        timeout=600,
    )
    sleeper = int((tmp_path / "pid").read_text())
    try:
        assert result.returncode == 1, result.stderr[-2000:]
        report = json.loads(result.stdout)
        assert [(d["code"], d["passes"]) for d in report["diagnostics"] if d["code"] == "MP401"] == [
            ("MP401", ["static", "trace"])
        ]
        assert not any(d["code"] == "MP001" for d in report["diagnostics"])
        assert not alive(sleeper)
    finally:
        kill_quietly(sleeper)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals as on POSIX")
@pytest.mark.parametrize("number,exit_code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_F08_signals_in_a_real_run(tmp_path, number, exit_code):
    script = tmp_path / "spin.py"
    record = tmp_path / "record"
    script.write_text(
        MODEL + FIND_RESULT_PATH + "import os, sys\n"
        f"open({str(record)!r}, 'w').write(f'{{os.getpid()}} {{os.path.dirname(RESULT_PATH)}}')\n"
        "while True:\n    pass\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "mpdoctor", "check", "--trace", "spin.py"],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    try:
        # The model code creates the record before it writes to it: wait for the whole line.
        pid, folder = wait_for(lambda: _record_line(record), 300, "the model code to run")
        process.send_signal(number)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == exit_code, stderr
        one_line_errors(stderr)
        assert not alive(int(pid)) and not os.path.exists(folder)
    finally:
        process.kill()
        line = _record_line(record)
        if line:
            kill_quietly(int(line[0]))


def _record_line(record: Path) -> list[str] | None:
    """'pid folder' once the model code has written it, None before."""
    try:
        fields = record.read_text().split(" ", 1)
    except FileNotFoundError:
        return None
    return fields if len(fields) == 2 else None


def test_F07_F09_a_real_trace_escapes_names_and_output_and_reads_forged_facts_as_unreadable(tmp_path):
    """One run: a layer named with terminal escapes and a newline, output with escapes, and an atexit handler that
    forges the facts after the child wrote them."""
    script = tmp_path / "layer.py"
    script.write_text(
        "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\ninp = keras.Input((4,))\n"
        "out = keras.layers.Dense(3, activation='softmax',\n"
        "                         name='o\\x1b]0;PWNED\\x07\\x1b[2J\\nm.py:9:9: MP999 forged')(inp)\n"
        "model = keras.Model(inp, out)\n"
    )
    result = run_cli("check", "--trace", "--no-numerics", "layer.py", cwd=tmp_path, timeout=600)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert not any(line.startswith("m.py:9:9") for line in result.stdout.splitlines())
    assert "o\\x1b]0;PWNED\\x07\\x1b[2J\\nm.py:9:9: MP999 forged" in result.stdout

    forged = tmp_path / "forged.py"
    forged.write_text(
        MODEL + FIND_RESULT_PATH + "import atexit, json, os, sys\n"
        "def forge():\n"
        "    json.dump({'version': 1, 'models': 'x', 'exception': 's', 'environment': 5}, open(RESULT_PATH, 'w'))\n"
        "    os.write(1, b'\\x1b]0;PWNED\\x07\\x1b[2Jlast words\\n')\n"
        "    os._exit(3)\n"
        "atexit.register(forge)\n"
    )
    result = run_cli("check", "--trace", "--no-numerics", "forged.py", cwd=tmp_path, timeout=600)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "\x1b" not in result.stdout
    [mp001] = [line for line in result.stdout.splitlines() if " MP001 " in line]
    assert "the trace produced unreadable facts ($.environment" in mp001 or "exited with code 3" in mp001
    assert "\\x1b]0;PWNED\\x07\\x1b[2Jlast words" in mp001
    assert "forged.py:3:" in result.stdout  # the static MP401 is kept
