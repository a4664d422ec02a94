"""`mpdoctor plan` through the real CLI and trace child, Keras 3 and tf_keras: the float32 set it finds, its
verification, the plan applied as code (run for real afterwards: finite outputs within rtol). Real models:
test_plan_real_models.py."""

from __future__ import annotations

import json
import os
import re
import textwrap

import pytest

pytest.importorskip("tensorflow")

from trace_support import run_python

from mpdoctor.cli import main

KERAS = [False, True]
IDS = ["keras3", "tf_keras"]

# A chain with a hazard only the sample shows (a naive log-sum-exp: exp overflows float16), a -1e9 mask constant
# (MP403 seeds it), a softmax head (MP401 seeds it) and exact benign layers. Run as a script it prints whether the
# float16 model's outputs are finite and their relative error against the same weights in float32.
HAZARDS = """\
    import sys

    import numpy as np
    import tensorflow as tf
    import KERAS

    keras.mixed_precision.set_global_policy("mixed_float16")


    class LogSumExp(keras.layers.Layer):
        def call(self, x):
            return x + 0.01 * tf.math.log(tf.reduce_sum(tf.exp(x * 20.0), -1, keepdims=True))


    class MaskedSoftmax(keras.layers.Layer):
        def call(self, x):
            mask = tf.cast(x > 0.5, x.dtype)
            return tf.nn.softmax(x + (1.0 - mask) * -1e9) * 16.0


    def build_model():
        inputs = keras.Input((16,))
        x = keras.layers.Dense(16, kernel_initializer="identity", name="first")(inputs)
        x = LogSumExp(name="lse")(x)
        x = keras.layers.Dense(16, kernel_initializer="identity", name="middle")(x)
        x = MaskedSoftmax(name="mask")(x)
        x = keras.layers.Dense(16, kernel_initializer="identity", name="last")(x)
        outputs = keras.layers.Dense(4, activation="softmax", name="head")(x)
        return keras.Model(inputs, outputs)


    if __name__ == "__main__":
        model = build_model()
        x = np.random.default_rng(0).random((2, 16)).astype("float32")
        low = np.asarray(model(x), dtype="float32")
        keras.mixed_precision.set_global_policy("float32")  # the same weights, every layer in float32
        reference = build_model()
        reference.set_weights(model.get_weights())
        high = np.asarray(reference(x), dtype="float32")
        error = float(np.max(np.abs(low - high)) / np.max(np.abs(high)))
        print("finite", bool(np.isfinite(low).all()), "error", error)
    """


def _write(tmp_path, body: str, legacy: bool, name: str = "model.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).replace("KERAS", "tf_keras as keras" if legacy else "keras"))
    return path


def _plan(monkeypatch, capsys, legacy: bool, *args: str) -> tuple[int, str, str]:
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1" if legacy else "0")
    code = main(["plan", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _ground_truth(path, legacy: bool) -> tuple[bool, float]:
    done = run_python(path, legacy=legacy)
    assert done.returncode == 0, done.stderr[-3000:]
    words = done.stdout.split()
    return words[words.index("finite") + 1] == "True", float(words[words.index("error") + 1])


@pytest.mark.parametrize("legacy", KERAS, ids=IDS)
def test_plan_finds_the_hazards_and_the_fixed_file_runs_finite(tmp_path, monkeypatch, capsys, legacy):
    path = _write(tmp_path, HAZARDS, legacy)
    finite, _ = _ground_truth(path, legacy)
    assert not finite  # the file as it is breaks under mixed_float16

    html = tmp_path / "report.html"
    code, out, err = _plan(monkeypatch, capsys, legacy, "--format", "json", "--html", str(html), str(path))
    assert code == 1, err
    plan = json.loads(out)["models"][0]["plan"]
    members = {layer["name"]: layer for layer in plan["layers"]}
    # The HTML report's graph outlines exactly the float32 set
    outlined = re.findall(r'<g class="node[^"]*float32-plan[^"]*" data-layer="([^"]+)"', html.read_text())
    assert sorted(outlined) == sorted(layer["id"] for layer in plan["layers"]), outlined
    # The -1e9 mask is made float16-safe by MP403's fix (the cheapest), not kept in float32 (#30). tf_keras runs the
    # layer's `call` as AutoGraph converts it from its source: the re-trace of the fixed text must read that text.
    constant_fixes = [fix["layer"] for fix in json.loads(out)["constant_fixes"]]
    assert set(members) == {"lse", "head"} and constant_fixes == ["mask"], plan
    assert members["lse"]["reason"] == "non-finite" and members["lse"]["op"] == "Exp", members["lse"]
    assert members["head"]["reason"] == "output-activation"
    assert plan["final"]["passed"] and not plan["initial"]["finite"]
    n = plan["candidates"]
    assert plan["forward_passes"] <= 2 * 3 * (n.bit_length()) + 3 + 2 + 1  # the bound, with the bfloat16 pass

    code, out, err = _plan(monkeypatch, capsys, legacy, "--fix", str(path))
    assert code == 0, out + err
    assert "verified: outputs finite" in out, out
    text = path.read_text()
    assert 'LogSumExp(name="lse", dtype="float32")' in text and 'name="head", dtype="float32"' in text, text
    assert "-1e4 if self.compute_dtype" in text and 'MaskedSoftmax(name="mask")' in text, text
    finite, error = _ground_truth(path, legacy)
    assert finite and error <= 0.01, error  # the applied plan, run for real


@pytest.mark.parametrize("legacy", KERAS, ids=IDS)
def test_a_clean_model_keeps_nothing_in_float32(tmp_path, monkeypatch, capsys, legacy):
    path = _write(
        tmp_path,
        """\
        import KERAS

        keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = keras.Input((16,))
        x = keras.layers.Dense(16, activation="relu")(inputs)
        model = keras.Model(inputs, keras.layers.Dense(4, dtype="float32")(x))
        """,
        legacy,
    )
    code, out, err = _plan(monkeypatch, capsys, legacy, str(path))
    assert code == 0, out + err
    assert "keep 0 of 1 layer in float32" in out and "within rtol 1.00%" in out, out


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["plan", str(tmp_path / "missing.py")]) == 2
    assert capsys.readouterr().err.strip() == f"mpdoctor: error: {tmp_path / 'missing.py'}: no such file"
    broken = tmp_path / "broken.py"
    broken.write_text("import keras\ndef (:\n")
    assert main(["plan", str(broken)]) == 2
    assert "syntax error" in capsys.readouterr().err
    fifo = tmp_path / "sample.npz"
    os.mkfifo(fifo)  # read, it would block the run
    assert main(["plan", "--sample", str(fifo), str(broken)]) == 2
    assert capsys.readouterr().err.strip() == f"mpdoctor: error: {fifo}: not a regular file (a FIFO)"


# The same hazards built by a helper module next to the file (as keras.applications or keras-hub build theirs): the
# plan cannot add dtype= to the file's own lines, so --fix inserts the snippet after the statement that builds the
# model (Keras 3: dtype_policy on the built layers; tf_keras: clone_model).
LIBRARY = """\
    import tensorflow as tf
    import KERAS


    class LogSumExp(keras.layers.Layer):
        def call(self, x):
            return x + 0.01 * tf.math.log(tf.reduce_sum(tf.exp(x * 20.0), -1, keepdims=True))


    def build_model():
        inputs = keras.Input((16,))
        x = keras.layers.Dense(16, kernel_initializer="identity", name="first")(inputs)
        x = LogSumExp(name="lse")(x)
        x = keras.layers.Dense(16, kernel_initializer="identity", name="last")(x)
        return keras.Model(inputs, keras.layers.Dense(4, activation="softmax", name="head")(x))
    """

USES_LIBRARY = """\
    import numpy as np
    import blocks
    import KERAS

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = blocks.build_model()

    if __name__ == "__main__":
        x = np.random.default_rng(0).random((2, 16)).astype("float32")
        low = np.asarray(model(x), dtype="float32")
        keras.mixed_precision.set_global_policy("float32")  # the same weights, every layer in float32
        reference = blocks.build_model()
        reference.set_weights(model.get_weights())
        high = np.asarray(reference(x), dtype="float32")
        error = float(np.max(np.abs(low - high)) / np.max(np.abs(high)))
        print("finite", bool(np.isfinite(low).all()), "error", error)
    """


@pytest.mark.parametrize("legacy", KERAS, ids=IDS)
def test_the_plan_for_library_layers_is_a_snippet_and_the_fixed_file_runs_finite(tmp_path, monkeypatch, capsys, legacy):
    _write(tmp_path, LIBRARY, legacy, "blocks.py")
    path = _write(tmp_path, USES_LIBRARY, legacy)
    finite, _ = _ground_truth(path, legacy)
    assert not finite  # the file as it is breaks under mixed_float16

    code, out, err = _plan(monkeypatch, capsys, legacy, "--fix", "--format", "json", str(path))
    assert code == 0, out + err
    document = json.loads(out)
    assert {layer["name"] for layer in document["models"][0]["plan"]["layers"]} == {"lse", "head"}, document
    fix = document["fix"]
    assert fix["written"] and fix["verified"] and fix["verification"].startswith("verified: outputs finite"), fix
    assert all("set to float32 after the model is built" in line for line in fix["applied"]), fix
    text = path.read_text()
    assert "# mpdoctor plan: keep these layers in float32" in text, text
    assert ("clone_model" in text) == legacy, text
    finite, error = _ground_truth(path, legacy)
    assert finite and error <= 0.01, error  # the applied plan, run for real


# Issue 33 item 9: a model that fails to build has no plan, and the output says why (the build error, one line).
CLASH = """\
    import KERAS
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_float16")


    class Scale(keras.layers.Layer):
        def call(self, x):
            return x * tf.constant([1.0, 2.0, 3.0, 4.0])


    inputs = keras.Input((4,))
    model = keras.Model(inputs, Scale()(keras.layers.Dense(4)(inputs)))
    """


@pytest.mark.parametrize("legacy", KERAS, ids=IDS)
def test_a_model_that_fails_to_build_gets_the_build_error_as_the_reason(tmp_path, monkeypatch, capsys, legacy):
    path = _write(tmp_path, CLASH, legacy)
    code, out, err = _plan(monkeypatch, capsys, legacy, str(path))
    assert code == 1, out + err
    [line] = out.splitlines()
    assert line.startswith(
        f"{path}: no model to plan: importing the file raised TypeError: Input 'y' of 'Mul' Op has type float32 "
        "that does not match type float16 of argument 'x'. (line "
    ), out


def test_verified_is_never_printed_by_a_run_that_exits_1(tmp_path, monkeypatch, capsys):
    """A plan that keeps a layer in float32 exits 1 (the file needs that change), shown or as a diff: its checks
    pass "within rtol"; "verified" only when --fix wrote it (exit 0)."""
    path = _write(
        tmp_path,
        """\
        import KERAS

        keras.mixed_precision.set_global_policy("mixed_float16")
        layers = [keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(3, activation="softmax")]
        model = keras.Sequential(layers)
        """,
        False,
    )
    for args in ([], ["--diff"]):
        code, out, err = _plan(monkeypatch, capsys, False, *args, str(path))
        assert code == 1 and "keep 1 of 2 layers in float32" in out + err, out + err
        shown = (out + err).replace(str(path), "model.py")  # the test's own name holds the word
        assert "verified" not in shown and "with the plan: outputs finite" in shown, shown
    assert "plan shown as a diff, not written (--diff); re-traced with it: outputs finite" in err, err
    code, out, err = _plan(monkeypatch, capsys, False, "--fix", str(path))
    assert code == 0 and "plan written into the file; verified: outputs finite" in out, out + err
