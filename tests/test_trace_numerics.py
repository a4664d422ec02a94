"""Numerics under trace (float16 vs float32 layer by layer): MP404, MP405, the trace forms of MP403/MP407 and MP503,
through the real trace in Keras 3 and tf_keras. Every model here is also run for real (`run_python`) where the
test claims it breaks or is fixed."""

from __future__ import annotations

import json
import math
import textwrap

import pytest

from mpdoctor.config import Config
from mpdoctor.diagnostics import Confidence, Diagnostic, Location, Severity
from mpdoctor.engine import check_source, static_after_trace
from mpdoctor.facts.schema import Facts, TraceSummary
from mpdoctor.facts.trace_request import NumericsRequest

pytest.importorskip("tensorflow")

from trace_support import trace_check

KERAS = [False, True]
IDS = ["keras3", "tf_keras"]


def _module(legacy: bool) -> str:
    return "tf_keras as keras" if legacy else "keras"


def _write(tmp_path, name: str, body: str, legacy: bool):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).replace("KERAS", _module(legacy)))
    return path


def _line(path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def _found(diagnostics, code: str) -> list[Diagnostic]:
    return [d for d in diagnostics if d.code == code]


# RULES.md false-positive traps: built-in LayerNormalization/BatchNormalization with epsilon=1e-12 under
# mixed_float16 give no MP403/MP404, even on zero-variance rows (a zero Dense: padding); a custom
# rsqrt(var + 1e-12) in float16 on the same rows does (MP403 + MP404), and so does a `* -1e9` attention mask.
TRAPS = """\
    import sys

    import numpy as np
    import tensorflow as tf
    import KERAS

    keras.mixed_precision.set_global_policy("mixed_float16")


    class RMSNormBad(keras.layers.Layer):
        def call(self, x):
            var = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)
            return x * tf.math.rsqrt(var + 1e-12)  # BAD_EPS


    class RMSNormGood(keras.layers.Layer):
        def call(self, x):
            var = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)
            return x * tf.math.rsqrt(var + 1e-7)


    class MaskedSoftmaxBad(keras.layers.Layer):
        def call(self, x):
            mask = tf.cast(x > 0.5, x.dtype)
            return tf.nn.softmax(x + (1.0 - mask) * -1e9)  # BAD_MASK


    class MaskedSoftmaxGood(keras.layers.Layer):
        def call(self, x):
            mask = tf.cast(x > 0.5, x.dtype)
            return tf.nn.softmax(x + (1.0 - mask) * -1e4)


    def padded(name):
        inputs = keras.Input((8,))
        return inputs, keras.layers.Dense(8, kernel_initializer="zeros", name=name)(inputs)


    inputs, rows = padded("pad_bad")
    bad_norm = keras.Model(inputs, RMSNormBad()(rows))
    inputs, rows = padded("pad_good")
    normalized = keras.layers.LayerNormalization(epsilon=1e-12)(rows)  # BUILTIN_LN
    normalized = keras.layers.BatchNormalization(epsilon=1e-12)(normalized)  # BUILTIN_BN
    good_norm = keras.Model(inputs, RMSNormGood()(normalized))
    inputs = keras.Input((8,))
    bad_mask = keras.Model(inputs, MaskedSoftmaxBad()(inputs))
    inputs = keras.Input((8,))
    good_mask = keras.Model(inputs, MaskedSoftmaxGood()(inputs))

    if __name__ == "__main__":
        x = np.random.default_rng(0).random((2, 8)).astype("float32")
        for name in sys.argv[1:]:
            print(name, bool(np.isfinite(np.asarray(globals()[name](x), dtype="float32")).all()))
    """


@pytest.mark.parametrize("legacy", KERAS, ids=IDS)
def test_float16_traps_mp403_mp404(tmp_path, legacy):
    path = _write(tmp_path, "traps.py", TRAPS, legacy)
    ground = run_python_args(path, legacy, "bad_norm", "good_norm", "bad_mask", "good_mask")
    assert ground == {"bad_norm": False, "good_norm": True, "bad_mask": False, "good_mask": True}, ground

    diagnostics = trace_check(path, legacy=legacy)
    mp404 = {(d.location.line, d.location.layer): d for d in _found(diagnostics, "MP404")}
    # at the op that went non-finite (issue 14 item 9), in the layer's call
    assert set(mp404) == {
        (_line(path, "BAD_EPS"), "rms_norm_bad"),
        (_line(path, "BAD_MASK"), "masked_softmax_bad"),
    }, mp404
    assert "`Rsqrt`" in mp404[(_line(path, "BAD_EPS"), "rms_norm_bad")].message
    mp403 = {d.location.line: d for d in _found(diagnostics, "MP403")}
    assert set(mp403) == {_line(path, "BAD_EPS"), _line(path, "BAD_MASK")}, mp403
    for d in mp403.values():  # the static finding, confirmed by the traced float16 graph
        assert d.passes == ("static", "trace") and d.confidence is Confidence.HIGH, d
    assert "holds the value as 0" in " ".join(mp403[_line(path, "BAD_EPS")].notes)
    assert "as -inf" in " ".join(mp403[_line(path, "BAD_MASK")].notes)


def run_python_args(path, legacy, *names) -> dict:
    result = run_python_with(path, legacy, names)
    return {
        name: value == "True"
        for name, value in (line.split() for line in result.stdout.splitlines() if line.split()[0] in names)
    }


def run_python_with(path, legacy, names):
    import os
    import subprocess
    import sys

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1" if legacy else "0")
    result = subprocess.run(
        [sys.executable, str(path), *names],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=path.parent,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result


# MP405: a hand-written variance E[x^2] - E[x]^2 of 4 values around 105 cancels catastrophically in float16 (spacing
# 8 at 1e4; 4 squares still sum below 65504, so the result stays finite); the same Lambda with dtype="float32" (the
# fix) stays within float16's normal rounding.
DIVERGENCE = """\
    import numpy as np
    import tensorflow as tf
    import KERAS

    keras.mixed_precision.set_global_policy("mixed_float16")


    def variance(t):
        return tf.reduce_mean(t * t, axis=-1, keepdims=True) - tf.square(tf.reduce_mean(t, axis=-1, keepdims=True))


    def build(dtype):
        inputs = keras.Input((4,))
        shifted = keras.layers.Dense(4, kernel_initializer="identity",
                                     bias_initializer=keras.initializers.Constant(100.0))(inputs)
        spread = keras.layers.Lambda(variance, dtype=dtype, name="variance")(shifted)
        return keras.Model(inputs, keras.layers.Activation("linear", dtype="float32")(spread))


    diverging = build(None)  # DIVERGING
    fixed = build("float32")

    if __name__ == "__main__":
        x = np.random.default_rng(0).random((2, 4)).astype("float32") * 10
        exact = np.var(x + 100.0, axis=-1, dtype="float64")
        for name, model in (("diverging", diverging), ("fixed", fixed)):
            got = np.asarray(model(x), dtype="float64")[:, 0]
            print(name, float(np.max(np.abs(got - exact)) / np.max(exact)))
    """


@pytest.mark.parametrize("legacy", KERAS, ids=IDS)
def test_precision_divergence_mp405(tmp_path, legacy):
    path = _write(tmp_path, "divergence.py", DIVERGENCE, legacy)
    errors = {
        name: float(value)
        for name, value in (line.split() for line in run_python_with(path, legacy, ()).stdout.splitlines())
    }
    assert math.isfinite(errors["diverging"]) and errors["diverging"] > 0.1, errors
    assert errors["fixed"] < 0.01, errors

    diagnostics = trace_check(path, legacy=legacy, numerics=NumericsRequest(range=[0.0, 10.0]))
    mp405 = _found(diagnostics, "MP405")
    assert [d.location.layer for d in mp405] == ["variance"], [d.message for d in mp405]
    assert "model `diverging`" in mp405[0].message
    assert not _found(diagnostics, "MP404")


# MP503: tf_keras losses compute in the predictions' dtype (measured: compute_loss on float16 predictions returns
# float16); Keras 3 losses cast predictions to float32 first, so there the float16 output stays MP402.
LOSS = """\
    import numpy as np
    import tensorflow as tf
    import KERAS

    keras.mixed_precision.set_global_policy("mixed_float16")

    inputs = keras.Input((8,))
    x = keras.layers.Dense(4)(inputs)
    fixed = keras.Model(inputs, keras.layers.Activation("linear", dtype="float32")(x))
    fixed.compile(optimizer="adam", loss="mse")

    inputs = keras.Input((8,))
    model = keras.Model(inputs, keras.layers.Dense(4, name="head")(inputs))  # HEAD
    model.compile(optimizer="adam", loss="mse")  # COMPILE

    if __name__ == "__main__":
        for name, m in (("model", model), ("fixed", fixed)):
            y_pred = m(np.ones((2, 8), "float32"))
            print(name, m.compute_loss(x=None, y=tf.zeros((2, 4)), y_pred=y_pred).dtype.name)
    """


@pytest.mark.parametrize("legacy", KERAS, ids=IDS)
def test_float16_loss_mp503(tmp_path, legacy):
    path = _write(tmp_path, "loss.py", LOSS, legacy)
    dtypes = dict(line.split() for line in run_python_with(path, legacy, ()).stdout.splitlines())
    assert dtypes == (
        {"model": "float16", "fixed": "float32"} if legacy else {"model": "float32", "fixed": "float32"}
    ), dtypes

    diagnostics = trace_check(path, legacy=legacy)
    mp503 = _found(diagnostics, "MP503")
    mp402 = [d.location.line for d in _found(diagnostics, "MP402")]
    if legacy:
        assert [(d.location.line, d.location.layer) for d in mp503] == [(_line(path, "COMPILE"), "head")]
        assert mp503[0].fix is not None and mp402 == []  # one finding for one cause
    else:
        assert mp503 == [] and mp402 == [_line(path, "HEAD")]


# A static MP403 on a value that the traced layer computes in float32 (a helper method whose argument the static
# pass cannot type: medium confidence) is downgraded to info, with the reason.
DOWNGRADE = """\
    import tensorflow as tf
    import KERAS

    keras.mixed_precision.set_global_policy("mixed_float16")


    class SafeNorm(keras.layers.Layer):
        def call(self, x):
            return tf.cast(self.normalize(tf.cast(x, tf.float32)), x.dtype)

        def normalize(self, v):
            var = tf.reduce_mean(tf.square(v), axis=-1, keepdims=True)
            return v * tf.math.rsqrt(var + 1e-12)  # EPS


    inputs = keras.Input((8,))
    model = keras.Model(inputs, SafeNorm()(inputs))
    """


@pytest.mark.parametrize("legacy", KERAS, ids=IDS)
def test_static_mp403_on_float32_code_is_downgraded(tmp_path, legacy):
    path = _write(tmp_path, "downgrade.py", DOWNGRADE, legacy)
    static, _ = check_source(path.read_text(), path.name, Config())
    assert [(d.code, d.severity) for d in static if d.code == "MP403"] == [("MP403", Severity.ERROR)]
    diagnostics = trace_check(path, legacy=legacy)
    mp403 = _found(diagnostics, "MP403")
    assert [d.location.line for d in mp403] == [_line(path, "EPS")], mp403
    assert mp403[0].severity is Severity.INFO and mp403[0].confidence is Confidence.LOW
    assert any("computes nothing in float16" in note for note in mp403[0].notes), mp403[0].notes
    assert not _found(diagnostics, "MP404")


def test_no_numerics_option_and_json_table(tmp_path):
    path = _write(tmp_path, "traps.py", TRAPS, False)
    diagnostics = trace_check(path, legacy=False, numerics=NumericsRequest(enabled=False))
    assert not _found(diagnostics, "MP404")
    assert all(d.passes == ("static",) for d in _found(diagnostics, "MP403"))


# ------------------------------------------------------------------------------------------ no TensorFlow needed


def test_numerics_table_is_json_safe_and_keeps_the_contract_keys():
    record = {
        "dtype": "float16",
        "reference_dtype": "float32",
        "batch_size": 2,
        "seed": 0,
        "skipped": None,
        "layers": [
            {
                "id": "a",
                "name": "a",
                "class": "Dense",
                "finite": False,
                "finite_reference": True,
                "max_abs": None,
                "max_abs_reference": 1.5,
                "relative_error": None,
            }
        ],
        "user_layers": [],
        "first_non_finite": None,
        "loss": None,
        "threshold": 0.05,
    }
    model = {"name": "m", "numerics": record}
    [summary] = TraceSummary.of("m.py", Facts.from_json({"models": [model]}), None).to_json()["models"]
    table = summary["numerics"]
    assert set(table) == {"dtype", "reference_dtype", "batch_size", "seed", "skipped", "layers"}
    text = json.dumps(table, allow_nan=False)
    assert json.loads(text)["layers"][0]["max_abs"] is None
    [summary] = TraceSummary.of("m.py", Facts.from_json({"models": [{"name": "m"}]}), None).to_json()["models"]
    assert summary["numerics"] is None


def test_static_after_trace_drops_confirms_and_downgrades():
    def finding(code, line):
        return Diagnostic(
            code, "m", Location("f.py", line, 1, line, 2), Severity.ERROR, ("static",), confidence=Confidence.MEDIUM
        )

    kept = static_after_trace(
        [finding("MP301", 1), finding("MP403", 2), finding("MP407", 3), finding("MP403", 4)],
        {("MP301", 1): None, ("MP403", 2): ("confirm", "seen"), ("MP407", 3): ("downgrade", "float32")},
    )
    assert [(d.code, d.location.line, d.severity, d.confidence, d.passes, d.notes) for d in kept] == [
        ("MP403", 2, Severity.ERROR, Confidence.HIGH, ("static", "trace"), ("seen",)),
        ("MP407", 3, Severity.INFO, Confidence.LOW, ("static",), ("float32",)),
        ("MP403", 4, Severity.ERROR, Confidence.MEDIUM, ("static",), ()),
    ]


# Nested and subclassed models: the table lists the inner layers of a nested model (qualified ids) before the nested
# model itself, and a subclassed model's sublayers are observed by hooking their calls during one pass per dtype.
STRUCTURES = """\
    import numpy as np
    import tensorflow as tf
    import KERAS

    keras.mixed_precision.set_global_policy("mixed_float16")


    class RMSNormBad(keras.layers.Layer):
        def call(self, x):
            var = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)
            return x * tf.math.rsqrt(var + 1e-12)


    inner_inputs = keras.Input((8,))
    block = keras.Model(inner_inputs, RMSNormBad()(keras.layers.Dense(8, kernel_initializer="zeros")(inner_inputs)),
                        name="block")
    inputs = keras.Input((8,))
    nested = keras.Model(inputs, keras.layers.Dense(2)(block(inputs)), name="nested")


    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__()
            self.pad = keras.layers.Dense(8, kernel_initializer="zeros")
            self.norm = RMSNormBad()
            self.head = keras.layers.Dense(2)

        def call(self, x):
            return self.head(self.norm(self.pad(x)))


    subclassed = Subclassed()
    subclassed(np.zeros((1, 8), "float32"))
    """


@pytest.mark.parametrize("legacy", KERAS, ids=IDS)
def test_nested_and_subclassed_models(tmp_path, legacy):
    path = _write(tmp_path, "structures.py", STRUCTURES, legacy)
    summaries: list = []
    diagnostics = trace_check(path, legacy=legacy, summaries=summaries)
    tables = {m["name"]: m["numerics"] for m in summaries[0].to_json()["models"]}
    nested_ids = [row["id"] for row in tables["nested"]["layers"]]
    assert (
        nested_ids.index("block/dense")
        < nested_ids.index("block/rms_norm_bad")
        < nested_ids.index("block")
        < nested_ids.index("dense_1")
    ), nested_ids
    subclassed = {row["class"]: row for row in tables["subclassed"]["layers"]}
    assert subclassed["RMSNormBad"]["finite"] is False and subclassed["RMSNormBad"]["finite_reference"] is True
    assert subclassed["Dense"]["finite_reference"] is True
    json.dumps(tables, allow_nan=False)  # JSON-safe: no NaN/inf anywhere
    mp404 = [(d.location.layer, "model `nested`" in d.message) for d in _found(diagnostics, "MP404")]
    assert ("block/rms_norm_bad", True) in mp404 and len(mp404) == 2, mp404


# --sample FILE.npz: the user's own batch (here rows with zero variance, which the generated [0, 1) batch never has).
SAMPLE_MODEL = """\
    import tensorflow as tf
    import KERAS

    keras.mixed_precision.set_global_policy("mixed_float16")


    class RMSNormBad(keras.layers.Layer):
        def call(self, x):
            var = tf.reduce_mean(tf.square(x - tf.reduce_mean(x, axis=-1, keepdims=True)), axis=-1, keepdims=True)
            return (x - tf.reduce_mean(x, axis=-1, keepdims=True)) * tf.math.rsqrt(var + 1e-12)


    inputs = keras.Input((8,), name="features")
    model = keras.Model(inputs, RMSNormBad()(inputs))
    """


def test_sample_file_and_cli_options(tmp_path):
    import numpy as np
    from test_cli import mpdoctor

    _write(tmp_path, "model.py", SAMPLE_MODEL, False)
    np.savez(tmp_path / "constant_rows.npz", features=np.full((3, 8), 0.25, "float32"))
    generated = mpdoctor("check", "--format", "json", "model.py", cwd=tmp_path)
    codes = {d["code"] for d in json.loads(generated.stdout)["diagnostics"]}
    assert "MP404" not in codes, generated.stdout
    supplied = mpdoctor("check", "--format", "json", "--sample", "constant_rows.npz", "model.py", cwd=tmp_path)
    report = json.loads(supplied.stdout)
    assert "MP404" in {d["code"] for d in report["diagnostics"]}, supplied.stdout
    assert report["traces"][0]["models"][0]["numerics"]["batch_size"] == 3
    off = mpdoctor(
        "check", "--format", "json", "--no-numerics", "--sample", "constant_rows.npz", "model.py", cwd=tmp_path
    )
    assert "MP404" not in {d["code"] for d in json.loads(off.stdout)["diagnostics"]}
    assert json.loads(off.stdout)["traces"][0]["models"][0]["numerics"]["skipped"].startswith("disabled")
    missing = mpdoctor("check", "--sample", "nope.npz", "model.py", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.strip() == "mpdoctor: error: nope.npz: no such file"


def test_float32_model_is_skipped_with_a_reason(tmp_path):
    path = tmp_path / "plain.py"
    path.write_text(
        "import keras\n\ninputs = keras.Input((4,))\nmodel = keras.Model(inputs, keras.layers.Dense(2)(inputs))\n"
    )
    summaries: list = []
    trace_check(path, legacy=False, summaries=summaries)
    table = summaries[0].to_json()["models"][0]["numerics"]
    assert table["skipped"] == "no layer computes in float16/bfloat16" and table["layers"] == []


@pytest.mark.parametrize(
    "toml,needle",
    [
        ("numerics = 'yes'", "numerics: expected true or false"),
        ("numerics-threshold = 0", "numerics-threshold: expected a positive number"),
        ("sample-batch-size = 0", "sample-batch-size: expected an integer from 1 to 1024"),
        ("sample-seed = -1", "sample-seed: expected a non-negative integer"),
        ("sample-range = [1.0, 0.0]", "sample-range: expected [low, high] with low < high"),
        ("sample-size = 3", "unknown key 'sample-size'"),
    ],
)
def test_bad_numerics_config_is_one_line_exit_2(tmp_path, toml, needle):
    from test_cli import mpdoctor

    (tmp_path / "pyproject.toml").write_text(f"[tool.mpdoctor]\n{toml}\n")
    (tmp_path / "model.py").write_text("import keras\n")
    result = mpdoctor("check", "--no-trace", "model.py", cwd=tmp_path)
    assert result.returncode == 2 and needle in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_numerics_config_reaches_the_child_request(tmp_path):
    from mpdoctor.config import load_config

    (tmp_path / "pyproject.toml").write_text(
        "[tool.mpdoctor]\nnumerics-threshold = 0.2\nsample-batch-size = 4\n"
        "sample-seed = 7\nsample-range = [-1, 1]\nnumerics = false\n"
    )
    request = load_config(tmp_path).numerics.request()
    assert request.to_json() == {
        "enabled": False,
        "threshold": 0.2,
        "batch_size": 4,
        "seed": 7,
        "range": [-1.0, 1.0],
        "sample": None,
    }


# bfloat16 has float32's exponent range: the same zero-variance rsqrt(var + 1e-12) stays finite under
# mixed_bfloat16 (no MP403, no MP404), and the numerics table still runs (dtype bfloat16).
@pytest.mark.parametrize("legacy", KERAS, ids=IDS)
def test_bfloat16_is_not_flagged(tmp_path, legacy):
    path = _write(tmp_path, "bf16.py", TRAPS.replace("mixed_float16", "mixed_bfloat16"), legacy)
    ground = run_python_args(path, legacy, "bad_norm", "bad_mask")
    assert ground == {"bad_norm": True, "bad_mask": True}, ground
    summaries: list = []
    diagnostics = trace_check(path, legacy=legacy, summaries=summaries)
    assert not [d for d in diagnostics if d.code in ("MP403", "MP404", "MP405")], [d.message for d in diagnostics]
    tables = [m["numerics"] for m in summaries[0].to_json()["models"]]
    assert {t["dtype"] for t in tables} == {"bfloat16"} and all(t["layers"] for t in tables), tables
