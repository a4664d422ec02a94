"""The checkpoint readers of mpdoctor.artifacts, the float16/bfloat16 range audit and the converter.

The restore tests prove the ground truth of docs/RULES.md and the fix: a float32 checkpoint fails to restore into
float16 variables (TF1 Saver: the second seed report; TF2 tf.train.Checkpoint; tf_keras load_weights under policy
"float16"), and the converted checkpoint restores. TensorFlow runs in this process, one small graph at a time.
"""

from __future__ import annotations

import hashlib
import os
import zipfile

import pytest

np = pytest.importorskip("numpy")  # comes with TensorFlow; without it every test here is moot

from mpdoctor.artifacts import convert, hdf5, range_audit, tf_checkpoint  # noqa: E402
from mpdoctor.artifacts.backends import numpy_dtype  # noqa: E402
from mpdoctor.artifacts.bundle_index import bundle_index  # noqa: E402
from mpdoctor.artifacts.convert import convert_checkpoint  # noqa: E402
from mpdoctor.artifacts.errors import CheckpointError  # noqa: E402
from mpdoctor.artifacts.range_audit import DEFAULT_UNDERFLOW_THRESHOLD, RangeStats, audit_checkpoint  # noqa: E402
from mpdoctor.artifacts.sources import read_checkpoint  # noqa: E402
from mpdoctor.artifacts.tf_checkpoint import OBJECT_GRAPH_KEY, TFSource  # noqa: E402
from mpdoctor.facts.artifacts import AuditRow  # noqa: E402

F16_MAX = 65504.0
F16_NORMAL = 2.0**-14
F16_SUBNORMAL = 2.0**-24


# --------------------------------------------------------------------------------------------------------------------
# helpers


@pytest.fixture(scope="module")
def tf():
    tf = pytest.importorskip("tensorflow")
    return tf


@pytest.fixture(scope="module")
def h5py():
    return pytest.importorskip("h5py")


def tree_digest(path) -> dict:
    """{file: sha256} of a file, a directory, or every file of a checkpoint prefix."""
    path = str(path)
    if os.path.isdir(path):
        files = [os.path.join(root, f) for root, _, names in os.walk(path) for f in names]
    elif os.path.isfile(path):
        files = [path]
    else:
        directory = os.path.dirname(path) or "."
        prefix = os.path.basename(path) + "."
        files = [os.path.join(directory, f) for f in os.listdir(directory) if f.startswith(prefix)]
    digests = {}
    for name in sorted(files):
        with open(name, "rb") as handle:
            digests[name] = hashlib.sha256(handle.read()).hexdigest()
    return digests


def reference_f16(values: np.ndarray) -> dict:
    """The audit's contract, written the slow obvious way."""
    a = np.abs(values.astype(np.float64).reshape(-1))
    finite = np.isfinite(a)
    f = a[finite]
    return {
        "values": a.size,
        "nonfinite": int((~finite).sum()),
        "overflow": int((f > F16_MAX).sum()),
        "max_abs": float(f.max()) if f.size else 0.0,
        "zeros": int((f == 0).sum()),
        "flushed": int(((f > 0) & (f < F16_SUBNORMAL)).sum()),
        "subnormal": int(((f >= F16_SUBNORMAL) & (f < F16_NORMAL)).sum()),
    }


def stats_of(values: np.ndarray, target: str = "float16") -> AuditRow:
    stats = RangeStats(target)
    stats.add(values)
    return stats.row("x", values.dtype.name, list(values.shape), None, DEFAULT_UNDERFLOW_THRESHOLD)


# --------------------------------------------------------------------------------------------------------------------
# The audit kernel (numpy only)


def test_float16_audit_counts_each_class_exactly():
    values = np.array(
        [7e4, -1e5, 65504.0, 1e-8, -3e-5, 0.0, 1.0, np.inf, np.nan, -0.0, F16_NORMAL, F16_SUBNORMAL], np.float32
    )
    result = stats_of(values)
    assert result.overflow == 2  # 7e4 and -1e5; 65504 itself is float16's max
    assert result.max_abs == 1e5  # finite values only
    assert result.nonfinite == 2
    assert result.flushed == 1  # 1e-8
    assert result.subnormal == 2  # -3e-5 and 2**-24 (the smallest float16 subnormal is kept)
    assert result.zeros == 2
    assert result.status == "nonfinite"
    assert result.overflow_fraction == pytest.approx(2 / 12)


@pytest.mark.parametrize("size", [1, 1000, range_audit._CHUNK + 17, 3 * range_audit._CHUNK])
def test_float16_fast_path_matches_reference_across_chunks(size):
    rng = np.random.default_rng(size)
    values = (rng.standard_normal(size) * rng.choice([1e-7, 1e-5, 1.0, 1e4, 1e5], size)).astype(np.float32)
    edges = np.array(
        [
            F16_MAX,
            np.nextafter(np.float32(F16_MAX), np.float32(np.inf)),
            F16_NORMAL,
            np.nextafter(np.float32(F16_NORMAL), np.float32(0)),
            F16_SUBNORMAL,
            np.nextafter(np.float32(F16_SUBNORMAL), np.float32(0)),
            1e-45,
            0.0,
        ],
        np.float32,
    )
    values[: min(size, edges.size)] = edges[: min(size, edges.size)]
    got = stats_of(values.reshape(-1, 1) if size > 1 else values)
    want = reference_f16(values)
    for key, value in want.items():
        assert getattr(got, key) == value, key


def test_generic_path_float64_and_bfloat16_sources():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([1e5, 1e-9, 3e-5, 0.5, 0.0], np.float64)
    for source in (values, values.astype(ml_dtypes.bfloat16)):
        result = stats_of(source)
        want = reference_f16(np.asarray(source, np.float64))
        for key, value in want.items():
            assert getattr(result, key) == value, (source.dtype, key)


def test_bfloat16_relative_precision_loss():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    values = rng.standard_normal(range_audit._CHUNK + 5).astype(np.float32)
    values[0] = 0.0
    result = stats_of(values, "bfloat16")
    rounded = values.astype(ml_dtypes.bfloat16).astype(np.float32)
    nonzero = values != 0
    rel = np.abs(values - rounded)[nonzero] / np.abs(values[nonzero])
    assert result.max_relative_error == pytest.approx(float(rel.max()))
    assert result.mean_relative_error == pytest.approx(float(rel.mean()), rel=1e-6)
    assert result.max_relative_error <= 2.0**-8  # bfloat16 keeps 8 significant bits
    assert result.overflow == 0 and result.status == "ok"


def test_underflow_status_uses_the_threshold():
    values = np.full(1000, 0.5, np.float32)
    values[:5] = 1e-6  # 0.5% subnormal in float16
    assert stats_of(values).status == "ok"
    stats = RangeStats("float16")
    stats.add(values)
    assert stats.row("x", "float32", [1000], None, 0.001).status == "underflow"


# --------------------------------------------------------------------------------------------------------------------
# TF artifacts, made once per module


@pytest.fixture(scope="module")
def artifacts(tf, tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpts")
    rng = np.random.default_rng(42)
    made = {"root": root}

    # TF1 name-based: the second seed report's graph (tf.compat.v1.layers.dense needs Keras 2, so the dense layer's
    # variables are made by hand under the same names).
    values = {
        "foo": rng.standard_normal((3, 3)).astype(np.float32),
        "dense/kernel": rng.standard_normal((3, 3)).astype(np.float32),
        "dense/bias": np.zeros(3, np.float32),
    }
    values["dense/kernel"][0, 0] = 1e-9  # flushes to zero in float16
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        graph_tf1(tf, np.float32, values)
        saver = tf.compat.v1.train.Saver({v.name: v for v in tf.compat.v1.trainable_variables()})
        sess.run(tf.compat.v1.global_variables_initializer())
        made["tf1"] = saver.save(sess, str(root / "tf1" / "tmp.ckpt"))
    made["tf1_values"] = values

    # TF2 object-based, with an int64 step and an overflowing value
    weights = rng.standard_normal((4, 5)).astype(np.float32)
    weights[1, 2] = 1e5
    checkpoint = tf.train.Checkpoint(model=tf.Module(), step=tf.Variable(7, dtype=tf.int64))
    checkpoint.model.w = tf.Variable(weights)
    checkpoint.model.b = tf.Variable(np.arange(5, dtype=np.float32))
    made["tf2"] = checkpoint.save(str(root / "tf2" / "ckpt"))
    made["tf2_values"] = {"w": weights, "b": np.arange(5, dtype=np.float32)}
    return made


def graph_tf1(tf, dtype, values):
    initial = {k: tf.constant_initializer(v) for k, v in values.items()}
    foo = tf.compat.v1.get_variable("foo", shape=[3, 3], dtype=dtype, initializer=initial["foo"])
    with tf.compat.v1.variable_scope("dense"):
        kernel = tf.compat.v1.get_variable("kernel", shape=[3, 3], dtype=dtype, initializer=initial["dense/kernel"])
        bias = tf.compat.v1.get_variable("bias", shape=[3], dtype=dtype, initializer=initial["dense/bias"])
    return tf.matmul(foo, kernel) + bias


def test_read_tf1_checkpoint(artifacts):
    info = read_checkpoint(artifacts["tf1"])
    assert info.format == "tf1-name"
    assert {v.key: (v.dtype, v.shape) for v in info.variables} == {
        "foo:0": ("float32", [3, 3]),
        "dense/kernel:0": ("float32", [3, 3]),
        "dense/bias:0": ("float32", [3]),
    }
    assert all(v.object_path is None for v in info.variables)
    assert info.files[0].endswith("tmp.ckpt.index")


def test_read_tf2_checkpoint_object_paths_and_ways_to_name_it(artifacts):
    info = read_checkpoint(artifacts["tf2"])
    assert info.format == "tf2-object"
    by_key = {v.key: v for v in info.variables}
    assert OBJECT_GRAPH_KEY not in by_key
    assert by_key["model/w/.ATTRIBUTES/VARIABLE_VALUE"].object_path == "model/w"
    assert by_key["model/w/.ATTRIBUTES/VARIABLE_VALUE"].shape == [4, 5]
    assert by_key["step/.ATTRIBUTES/VARIABLE_VALUE"].dtype == "int64"
    assert info.dtypes == {"float32": 2, "int64": 2}
    prefix = artifacts["tf2"]
    for other in (prefix + ".index", prefix + ".data-00000-of-00001", os.path.dirname(prefix)):
        assert read_checkpoint(other).variables == info.variables, other


def test_read_does_not_read_tensor_data(artifacts, monkeypatch):
    calls = []
    original = TFSource.read
    monkeypatch.setattr(TFSource, "read", lambda self, key: calls.append(key) or original(self, key))
    read_checkpoint(artifacts["tf2"])
    assert calls == [OBJECT_GRAPH_KEY]  # the object graph (a few hundred bytes), never a variable


def test_audit_tf2_finds_the_overflow(artifacts):
    audit = audit_checkpoint(artifacts["tf2"], "float16")
    rows = {r.key: r for r in audit.variables}
    assert set(rows) == {"model/w/.ATTRIBUTES/VARIABLE_VALUE", "model/b/.ATTRIBUTES/VARIABLE_VALUE"}  # floats only
    w = rows["model/w/.ATTRIBUTES/VARIABLE_VALUE"]
    assert (w.overflow, w.max_abs, w.status) == (1, 1e5, "overflow")
    assert audit.safe is False and audit.skipped == 2
    assert audit.verdict.startswith("NOT safe for float16: 1 variable overflow")


def test_audit_streams_float_tensors_from_the_shards_in_small_chunks(tf, tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    big = (rng.standard_normal((700, 1000)) * 0.02).astype(np.float32)  # 2.8 MB: three 1 MiB chunks
    big[699, 999] = -9e4
    prefix = tf.train.Checkpoint(
        big=tf.Variable(big), half=tf.Variable(big[:3].astype(np.float16)), f64=tf.Variable(np.array([1e6, 1e-30]))
    ).write(str(tmp_path / "ck"))
    sizes, reads = [], []
    original_add, original_read = RangeStats.add, TFSource.read
    monkeypatch.setattr(RangeStats, "add", lambda self, a: sizes.append(a.nbytes) or original_add(self, a))
    monkeypatch.setattr(TFSource, "read", lambda self, key: reads.append(key) or original_read(self, key))
    streamed = audit_checkpoint(prefix, "float16")
    assert max(sizes) <= tf_checkpoint._READ_BYTES
    assert sum(sizes) == big.nbytes + 16  # float16 entry: already the target
    assert reads == [OBJECT_GRAPH_KEY]  # TF's reader only for the object graph
    sizes.clear()
    verified = audit_checkpoint(prefix, "float16", verify_checksums=True)
    assert max(sizes) == big.nbytes  # whole tensors through TF's reader
    assert len(streamed.variables) == len(verified.variables)
    for a, b in zip(streamed.variables, verified.variables, strict=True):
        assert a == b
    rows = {r.key.split("/")[0]: r for r in streamed.variables}
    assert rows["big"].overflow == 1 and rows["big"].max_abs == pytest.approx(9e4)
    assert (rows["f64"].overflow, rows["f64"].flushed) == (1, 1)
    assert streamed.summary["values"] == big.size + 2


def test_corrupt_shard_checksum_caught_by_converter_and_verified_audit(tf, artifacts, tmp_path):
    _, entries = bundle_index(artifacts["tf2"] + ".index")
    where = entries["model/w/.ATTRIBUTES/VARIABLE_VALUE"].offset
    for name in os.listdir(os.path.dirname(artifacts["tf2"])):
        if name.startswith(os.path.basename(artifacts["tf2"]) + "."):
            with open(os.path.join(os.path.dirname(artifacts["tf2"]), name), "rb") as handle:
                data = bytearray(handle.read())
            if ".data-" in name:
                data[where] ^= 0x40  # flip a bit of model/w
            (tmp_path / name).write_bytes(bytes(data))
    prefix = str(tmp_path / os.path.basename(artifacts["tf2"]))
    audit_checkpoint(prefix, "float16")  # the streaming audit does not check CRC32C (documented)
    with pytest.raises(CheckpointError, match=r"corrupt data shard: tensor .* fails its checksum"):
        audit_checkpoint(prefix, "float16", verify_checksums=True)
    with pytest.raises(CheckpointError, match="corrupt data shard"):
        convert_checkpoint(prefix, str(tmp_path / "out"), "float16")
    assert not [f for f in os.listdir(tmp_path) if f.startswith(("out", "."))]


def test_audit_bfloat16_tf1(artifacts):
    audit = audit_checkpoint(artifacts["tf1"], "bfloat16")
    assert audit.safe and audit.summary["variables"] == 3
    assert 0 < audit.summary["max_relative_error"] <= 2.0**-8
    assert "relative precision loss" in audit.verdict


# --------------------------------------------------------------------------------------------------------------------
# Conversion: the converted checkpoint restores where the original failed


def test_seed_tf1_float32_saver_checkpoint_restores_into_float16_graph_after_conversion(tf, artifacts, tmp_path):
    values = artifacts["tf1_values"]
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        graph_tf1(tf, np.float16, {k: np.zeros_like(v) for k, v in values.items()})
        saver = tf.compat.v1.train.Saver({v.name: v for v in tf.compat.v1.trainable_variables()})
        with pytest.raises(tf.errors.InvalidArgumentError, match="expected dtype half does not equal original"):
            saver.restore(sess, artifacts["tf1"])

    before = tree_digest(artifacts["tf1"])
    os.makedirs(tmp_path / "f16")
    result = convert_checkpoint(artifacts["tf1"], str(tmp_path / "f16" / "tmp.ckpt"), "float16")
    assert tree_digest(artifacts["tf1"]) == before  # IN untouched
    assert sorted(result.cast) == ["dense/bias:0", "dense/kernel:0", "foo:0"]
    assert result.verified and result.audit.summary["flushed_values"] == 1
    assert any(".meta" in note for note in result.notes)

    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        out = graph_tf1(tf, np.float16, {k: np.zeros_like(v) for k, v in values.items()})
        saver = tf.compat.v1.train.Saver({v.name: v for v in tf.compat.v1.trainable_variables()})
        saver.restore(sess, str(tmp_path / "f16" / "tmp.ckpt"))
        got = sess.run(out)
    want = values["foo"].astype(np.float16) @ values["dense/kernel"].astype(np.float16)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_tf2_checkpoint_restores_into_float16_variables_after_conversion(tf, artifacts, tmp_path):
    def float16_checkpoint():
        checkpoint = tf.train.Checkpoint(model=tf.Module(), step=tf.Variable(0, dtype=tf.int64))
        checkpoint.model.w = tf.Variable(np.zeros((4, 5), np.float16))
        checkpoint.model.b = tf.Variable(np.zeros(5, np.float16))
        return checkpoint

    with pytest.raises(tf.errors.InvalidArgumentError, match="expected dtype half does not equal original"):
        float16_checkpoint().read(artifacts["tf2"]).assert_consumed()

    out = str(tmp_path / "ckpt16")
    result = convert_checkpoint(artifacts["tf2"], out, "float16")
    assert result.audit.summary["overflow_values"] == 1
    restored = float16_checkpoint()
    restored.restore(out).assert_consumed()
    np.testing.assert_array_equal(restored.model.w.numpy(), artifacts["tf2_values"]["w"].astype(np.float16))
    assert np.isinf(restored.model.w.numpy()[1, 2])  # 1e5 is inf in float16: what the audit warned about
    assert int(restored.step.numpy()) == 7  # int64 untouched

    info = read_checkpoint(out)
    assert info.dtypes == {"float16": 2, "int64": 2}
    assert [v.object_path for v in info.variables] == [
        v.object_path for v in read_checkpoint(artifacts["tf2"]).variables
    ]

    back = str(tmp_path / "ckpt32")  # and back to float32
    convert_checkpoint(out, back, "float32")
    assert read_checkpoint(back).dtypes == {"float32": 2, "int64": 2}


def test_tf_keras_model_under_float16_policy_loads_converted_weights(tf, tmp_path):
    tf_keras = pytest.importorskip("tf_keras")

    def build():
        return tf_keras.Sequential([tf_keras.layers.Dense(4, input_shape=(3,)), tf_keras.layers.Dense(2)])

    model = build()
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    want = model(x).numpy()
    model.save_weights(str(tmp_path / "w32" / "weights"))  # TF format (no .h5 suffix)
    tf_keras.mixed_precision.set_global_policy("float16")
    try:
        half = build()
        assert half.layers[0].kernel.dtype == tf.float16
        with pytest.raises(Exception, match="expected dtype half does not equal original"):
            half.load_weights(str(tmp_path / "w32" / "weights"))
        convert_checkpoint(str(tmp_path / "w32" / "weights"), str(tmp_path / "w16"), "float16")
        half = build()
        half.load_weights(str(tmp_path / "w16"))
        got = half(x.astype(np.float16)).numpy()
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)


def test_convert_directory_writes_a_directory_with_a_state_file(tf, artifacts, tmp_path):
    src_dir = os.path.dirname(artifacts["tf2"])
    out = tmp_path / "converted"
    result = convert_checkpoint(src_dir, str(out), "bfloat16")
    assert sorted(os.listdir(out)) == ["checkpoint", "ckpt-1.data-00000-of-00001", "ckpt-1.index"]
    assert read_checkpoint(str(out)).dtypes == {"bfloat16": 2, "int64": 2}
    assert result.files and all(os.path.exists(f) for f in result.files)
    restored = tf.train.Checkpoint(model=tf.Module(), step=tf.Variable(0, dtype=tf.int64))
    restored.model.w = tf.Variable(tf.zeros((4, 5), tf.bfloat16))
    restored.model.b = tf.Variable(tf.zeros(5, tf.bfloat16))
    restored.restore(tf.train.latest_checkpoint(str(out))).assert_consumed()


def test_convert_only_regex_casts_matching_entries_only(tf, artifacts, tmp_path):
    out = str(tmp_path / "partial")
    result = convert_checkpoint(artifacts["tf2"], out, "float16", only=r"/w/")
    assert result.cast == ["model/w/.ATTRIBUTES/VARIABLE_VALUE"]
    dtypes = {v.key: v.dtype for v in read_checkpoint(out).variables}
    assert dtypes["model/w/.ATTRIBUTES/VARIABLE_VALUE"] == "float16"
    assert dtypes["model/b/.ATTRIBUTES/VARIABLE_VALUE"] == "float32"
    with pytest.raises(CheckpointError, match="matches no float entry"):
        convert_checkpoint(artifacts["tf2"], str(tmp_path / "none"), "float16", only="nomatch", require_match=True)
    with pytest.raises(CheckpointError, match="invalid regular expression"):
        convert_checkpoint(artifacts["tf2"], str(tmp_path / "bad"), "float16", only="(")
    assert not [f for f in os.listdir(tmp_path) if f.startswith(("none", "bad", "."))]


def test_convert_refuses_existing_output_and_input_as_output(tf, artifacts, tmp_path):
    out = str(tmp_path / "c")
    convert_checkpoint(artifacts["tf2"], out, "float16")
    before = tree_digest(out)
    with pytest.raises(CheckpointError, match="already exists"):
        convert_checkpoint(artifacts["tf2"], out, "bfloat16")
    assert tree_digest(out) == before
    for same in (artifacts["tf2"], artifacts["tf2"] + ".index"):
        with pytest.raises(CheckpointError, match="is the input"):
            convert_checkpoint(artifacts["tf2"], same, "float16", force=True)
    convert_checkpoint(artifacts["tf2"], out, "bfloat16", force=True)
    assert read_checkpoint(out).dtypes["bfloat16"] == 2
    assert sorted(os.listdir(tmp_path)) == ["c.data-00000-of-00001", "c.index"]  # no temporaries left


def test_convert_many_batches_merges_shards(tf, tmp_path, monkeypatch):
    variables = {f"v{i}": tf.Variable(np.full((64,), i, np.float32)) for i in range(5)}
    prefix = tf.train.Checkpoint(**variables).write(str(tmp_path / "src" / "ck"))
    monkeypatch.setattr(convert, "_BATCH_BYTES", 300)  # about one tensor per SaveV2 call
    convert_checkpoint(prefix, str(tmp_path / "out"), "float16")
    shards = [f for f in os.listdir(tmp_path) if ".data-" in f]
    assert len(shards) > 1
    reader = tf.train.load_checkpoint(str(tmp_path / "out"))
    for i in range(5):
        np.testing.assert_array_equal(reader.get_tensor(f"v{i}/.ATTRIBUTES/VARIABLE_VALUE"), np.full(64, i, np.float16))


def test_verification_failure_leaves_nothing(tf, artifacts, tmp_path, monkeypatch):
    counter = iter(range(10**6))
    monkeypatch.setattr(convert, "_fingerprint", lambda value: next(counter))  # every read-back differs
    with pytest.raises(CheckpointError, match="verification failed"):
        convert_checkpoint(artifacts["tf2"], str(tmp_path / "v"), "float16")
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------------------------------------------------
# Keras HDF5 and .keras


def keras2_h5(h5py, path, full_model: bool):
    with h5py.File(path, "w") as f:
        root = f.create_group("model_weights") if full_model else f
        root.attrs["layer_names"] = np.array([b"dense"])
        root.attrs["backend"] = b"tensorflow"
        group = root.create_group("dense")
        group.attrs["weight_names"] = np.array([b"dense/kernel:0", b"dense/bias:0"])
        group.create_dataset("dense/kernel:0", data=np.array([[1.0, 7e4], [1e-9, 2.0]], np.float32))
        group.create_dataset("dense/bias:0", data=np.zeros(2, np.float32))
        if full_model:
            f.attrs["model_config"] = b'{"class_name": "Sequential"}'
            f.create_dataset("optimizer_weights/iteration:0", data=np.int64(3))
    return str(path)


@pytest.mark.parametrize("full_model", [False, True])
def test_keras2_h5_read_audit_convert(h5py, tmp_path, full_model):
    src = keras2_h5(h5py, tmp_path / "w.h5", full_model)
    info = read_checkpoint(src)
    assert info.format == "keras2-h5"
    names = {v.name for v in info.variables}
    assert {"dense/kernel:0", "dense/bias:0"} <= names
    audit = audit_checkpoint(src, "float16")
    kernel = next(r for r in audit.variables if r.key.endswith("kernel:0"))
    assert (kernel.overflow, kernel.flushed, kernel.max_abs) == (1, 1, 7e4)

    before = tree_digest(src)
    result = convert_checkpoint(src, str(tmp_path / "w16.h5"), "float16")
    assert tree_digest(src) == before
    with h5py.File(tmp_path / "w16.h5") as f, h5py.File(src) as g:
        root = "model_weights/" if full_model else ""
        assert f[root + "dense/dense/kernel:0"].dtype == np.float16
        assert list(f[root + "dense"].attrs["weight_names"]) == list(g[root + "dense"].attrs["weight_names"])
        assert list((f[root] if root else f).attrs["layer_names"]) == [b"dense"]
        if full_model:
            assert f["optimizer_weights/iteration:0"].dtype == np.int64
            assert f.attrs["model_config"] == g.attrs["model_config"]
    assert result.audit.summary["overflow_values"] == 1
    with pytest.raises(CheckpointError, match="cannot hold bfloat16"):
        convert_checkpoint(src, str(tmp_path / "bf.h5"), "bfloat16")
    with pytest.raises(CheckpointError, match="must end in"):
        convert_checkpoint(src, str(tmp_path / "w16.weights"), "float16")


def test_h5_datasets_stream_in_slabs(h5py, tmp_path, monkeypatch):
    values = np.random.default_rng(3).standard_normal((1000, 8)).astype(np.float32)
    values[999, 7] = 1e6
    with h5py.File(tmp_path / "big.weights.h5", "w") as f:
        f.create_dataset("layers/dense/vars/0", data=values)
        f["layers/dense/vars"].attrs["name"] = "dense"
    monkeypatch.setattr(hdf5, "SLAB_BYTES", 4096)  # 128 rows per slab
    sizes = []
    original = RangeStats.add
    monkeypatch.setattr(RangeStats, "add", lambda self, a: sizes.append(a.shape[0]) or original(self, a))
    audit = audit_checkpoint(str(tmp_path / "big.weights.h5"), "float16")
    assert max(sizes) == 128 and sum(sizes) == 1000
    assert audit.variables[0].overflow == 1
    convert_checkpoint(str(tmp_path / "big.weights.h5"), str(tmp_path / "out.weights.h5"), "float16")
    with h5py.File(tmp_path / "out.weights.h5") as f:
        np.testing.assert_array_equal(f["layers/dense/vars/0"][()], values.astype(np.float16))


@pytest.fixture(scope="module")
def keras3_files(tmp_path_factory):
    keras = pytest.importorskip("keras")
    pytest.importorskip("h5py")
    root = tmp_path_factory.mktemp("keras3")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    model.save_weights(str(root / "m.weights.h5"))
    model.save(str(root / "m.keras"))
    return keras, model, root


def build_keras3(keras, policy):
    return keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4, dtype=policy), keras.layers.Dense(2, dtype=policy)]
    )


@pytest.mark.parametrize("name", ["m.weights.h5", "m.keras"])
@pytest.mark.parametrize("target", ["float16", "bfloat16"])
def test_keras3_weights_convert_and_load(keras3_files, tmp_path, name, target):
    keras, model, root = keras3_files
    info = read_checkpoint(str(root / name))
    assert info.format == ("keras3-archive" if name.endswith(".keras") else "keras3-weights-h5")
    assert info.dtypes == {"float32": 4}
    out = str(tmp_path / name)
    convert_checkpoint(str(root / name), out, target)
    assert read_checkpoint(out).dtypes == {target: 4}
    half = build_keras3(keras, target)
    if name.endswith(".keras"):
        with zipfile.ZipFile(out) as archive:
            assert archive.namelist() == zipfile.ZipFile(str(root / name)).namelist()
        half = keras.saving.load_model(out)
    else:
        half.load_weights(out)
    for mine, theirs in zip(half.weights, model.weights, strict=True):
        np.testing.assert_allclose(
            np.asarray(mine.numpy(), np.float32),
            np.asarray(theirs.numpy()).astype(numpy_dtype(target)).astype(np.float32),
        )


def test_keras_archive_with_compressed_weights_member(keras3_files, tmp_path):
    _, _, root = keras3_files
    src = tmp_path / "deflated.keras"
    with zipfile.ZipFile(root / "m.keras") as zin, zipfile.ZipFile(src, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            zout.writestr(item.filename, zin.read(item))
    assert read_checkpoint(str(src)).dtypes == {"float32": 4}
    convert_checkpoint(str(src), str(tmp_path / "out.keras"), "float16")
    assert read_checkpoint(str(tmp_path / "out.keras")).dtypes == {"float16": 4}
