"""Fuzzing the static pass and its fixes (issue 8): hypothesis-generated Keras-flavoured modules and mutations of
the fixture corpus go through `check_source` and every fix. Never an internal error or an exception; every fixed
output parses (when the input did).

Reproducible: derandomized, no example database. `MPDOCTOR_FUZZ_EXAMPLES=N` sets the examples per test (nightly:
e.g. 20000); the default keeps the static tests here to a few seconds (they run in the no-TensorFlow stage).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpdoctor.config import Config
from mpdoctor.engine import check_source
from mpdoctor.fix.apply import EditConflict, apply_fixes

EXAMPLES = int(os.environ.get("MPDOCTOR_FUZZ_EXAMPLES", "400"))
FIXTURES = sorted((Path(__file__).parent / "fixtures").rglob("*.py"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CONFIGS = [Config()]
_assumed = Config()
_assumed.assume_policy = "mixed_float16"
CONFIGS.append(_assumed)


def parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def check_and_fix(text: str) -> None:
    """The properties every input must satisfy."""
    for config in CONFIGS:
        diagnostics, error = check_source(text, "fuzzed.py", config)
        if error is not None:
            assert error.kind == "syntax" and not parses(text), error.render()
            assert not diagnostics
            continue
        fixable = [d for d in diagnostics if d.fix]
        for d in fixable:  # every fix on its own
            fixed = apply_fixes(text, [d])
            assert parses(fixed), f"{d.code} fix broke the file:\n{fixed}"
        try:
            fixed = apply_fixes(text, fixable)  # all together: either a documented conflict or valid Python
        except EditConflict:
            continue
        assert parses(fixed), f"fixes {[d.code for d in fixable]} together broke the file:\n{fixed}"
        if fixable:
            _, again = check_source(fixed, "fuzzed.py", config)
            assert again is None, again.render()


# ---------------------------------------------------------------------------------------------- generated modules

IMPORTS = st.sampled_from(
    [
        "import tensorflow as tf",
        "from tensorflow import keras",
        "import keras",
        "import tf_keras",
        "from keras import mixed_precision",
        "from tensorflow.keras import layers",
        "import tensorflow_hub as hub",
        "from tensorflow.keras import mixed_precision",
        "import numpy as np",
        "from keras import layers",
        "import os\nos.environ['TF_USE_LEGACY_KERAS'] = '1'",
    ]
)
POLICY = st.sampled_from(
    [
        '"mixed_float16"',
        '"mixed_bfloat16"',
        '"float32"',
        '"float16"',
        "POLICY",
        "policy",
        'mixed_precision.Policy("mixed_float16")',
        "None",
    ]
)
DTYPE = st.sampled_from(
    [
        "",
        ', dtype="float32"',
        ', dtype="float16"',
        ", dtype=tf.float32",
        ', dtype="mixed_float16"',
        ", dtype=policy",
        ", dtype=None",
    ]
)
ACTIVATION = st.sampled_from(['"softmax"', '"sigmoid"', '"relu"', "None", "tf.nn.softmax", '"linear"', '"log_softmax"'])
CONSTANT = st.sampled_from(
    [
        "-1e9",
        "1e9",
        "-1e4",
        "1e-8",
        "1e-10",
        "65504.0",
        "65505",
        "float('-inf')",
        "-2**31",
        "1e-7",
        "0.0",
        "-1e30",
        "3.4e38",
        "np.finfo(np.float32).min",
        "NEG_INF",
    ]
)
MODULE = st.sampled_from(["keras", "tf.keras", "tf_keras", "layers"])
NAME = st.sampled_from(["x", "inputs", "outputs", "model", "h", "logits"])


@st.composite
def policy_statement(draw):
    module = draw(
        st.sampled_from(
            [
                "keras.mixed_precision",
                "tf.keras.mixed_precision",
                "mixed_precision",
                "tf.keras.mixed_precision.experimental",
                "tf_keras.mixed_precision",
                "keras.config",
            ]
        )
    )
    setter = draw(st.sampled_from(["set_global_policy", "set_policy", "set_dtype_policy", "set_floatx"]))
    return f"{module}.{setter}({draw(POLICY)})"


@st.composite
def layer_statement(draw):
    module = draw(MODULE)
    kind = draw(
        st.sampled_from(
            [
                "Dense(4{dt}, activation={act})",
                "Softmax({dt0})",
                "Activation({act}{dt})",
                "LayerNormalization(epsilon={c}{dt})",
                "Embedding(10, 4{dt})",
                "Lambda(lambda t: tf.cast(t, tf.float32))",
                "BatchNormalization({dt0})",
                "Dense(3, activation={act}{dt}, name='out')",
                "Conv2D(3, 3{dt})",
            ]
        )
    )
    dtype = draw(DTYPE)
    layer = kind.format(dt=dtype, dt0=dtype.lstrip(", "), act=draw(ACTIVATION), c=draw(CONSTANT))
    target, source = draw(NAME), draw(NAME)
    return f"{target} = {module}.layers.{layer}({source})" if "layers.Layer" not in layer else layer


@st.composite
def custom_layer(draw):
    base = draw(
        st.sampled_from(
            ["keras.layers.Layer", "tf.keras.layers.Layer", "layers.Layer", "keras.Model", "tf.keras.Model", "Base"]
        )
    )
    body = draw(
        st.lists(
            st.sampled_from(
                [
                    "mask = tf.cast(x > 0, x.dtype)",
                    "x = x + (1.0 - mask) * {c}",
                    "x = tf.where(x > 0, x, {c})",
                    "x = tf.math.log(x + {c})",
                    "x = tf.cast(x, tf.float32)",
                    "x = x * {c}",
                    "x = tf.nn.softmax(x)",
                    "x = tf.fill(tf.shape(x), {c})",
                    "x = tf.constant({c}, dtype=x.dtype) + x",
                    "return x",
                    "if training:\n            x = x / {c}",
                    "x = self.dense(x)",
                ]
            ),
            min_size=1,
            max_size=6,
        )
    )
    lines = [line.format(c=draw(CONSTANT)) for line in body]
    init = draw(
        st.sampled_from(
            [
                "",
                (
                    "    def __init__(self, **kwargs):\n        super().__init__(**kwargs)\n"
                    "        self.dense = keras.layers.Dense(4{dt})\n"
                ),
            ]
        )
    ).format(dt=draw(DTYPE))
    return (
        f"class Block({base}):\n"
        + init
        + "    def call(self, x, training=False):\n"
        + "".join(f"        {line}\n" for line in lines)
        + "        return x\n"
    )


@st.composite
def model_statement(draw):
    return draw(
        st.sampled_from(
            [
                "model = keras.Model(inputs, x)",
                "model = tf.keras.Sequential([keras.Input((4,)), Block()])",
                "model = keras.Sequential([{module}.layers.Dense(2, activation={act}{dt})])",
                "model.compile(optimizer='adam', loss='categorical_crossentropy')",
                "opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())",
                "opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer('adam', 'dynamic')",
                "model.fit(x, x, epochs=1)",
                "model.save('m.keras')",
                "model.export('serving')",
                "tf.saved_model.save(model, 'export')",
                "tf.train.Checkpoint(model=model).restore('ckpt').expect_partial()",
                "layer = hub.KerasLayer('https://tfhub.dev/x/1', trainable=False{dt})",
                "x = Block({dt0})(x)",
                "inputs = keras.Input((4,), dtype={dtype})",
                "loss = opt.get_scaled_loss(loss)",
                "with tf.GradientTape() as tape:\n    loss = model(x)",
                "x = tf.keras.layers.TFSMLayer('sm', call_endpoint='serve')(x)",
                "POLICY = {policy}",
                "policy = mixed_precision.Policy({policy})",
                "NEG_INF = {c}",
            ]
        )
    ).format(
        module=draw(MODULE),
        act=draw(ACTIVATION),
        dt=(dt := draw(DTYPE)),
        dt0=dt.lstrip(", "),
        dtype=draw(st.sampled_from(['"float16"', '"float32"', "tf.int32", "None"])),
        policy=draw(POLICY),
        c=draw(CONSTANT),
    )


def _indent(block: str) -> str:
    return "".join(f"    {line}\n" if line else "\n" for line in block.splitlines())


HEADERS = [
    (
        "import tensorflow as tf\nimport keras\nfrom keras import layers, mixed_precision\n\n"
        "keras.mixed_precision.set_global_policy('mixed_float16')\ninputs = keras.Input((4,))\nx = inputs\n"
    ),
    (
        "import os\nos.environ['TF_USE_LEGACY_KERAS'] = '1'\nimport tensorflow as tf\nimport tensorflow_hub as hub\n"
        "from tensorflow.keras import layers, mixed_precision\n\nkeras = tf.keras\n"
        "tf.keras.mixed_precision.set_global_policy('mixed_bfloat16')\ninputs = keras.Input((4,))\nx = inputs\n"
    ),
    "import tensorflow as tf\nfrom tensorflow import keras\nPOLICY = 'mixed_float16'\n",
    "",
]


@st.composite
def module_source(draw):
    header = draw(st.sampled_from(HEADERS))
    top = draw(
        st.lists(
            st.one_of(IMPORTS, policy_statement(), layer_statement(), custom_layer(), model_statement()),
            min_size=1,
            max_size=14,
        )
    )
    wrapper = draw(st.sampled_from(["", "def build_model():\n", 'if __name__ == "__main__":\n', "def main(x):\n"]))
    if wrapper and len(top) > 1:
        split = draw(st.integers(1, len(top) - 1))
        body = "\n".join(top[split:])
        tail = "    return model\n" if wrapper.startswith("def") else ""
        return header + "\n".join(top[:split]) + "\n\n" + wrapper + _indent(body) + tail
    return header + "\n".join(top) + "\n"


@pytest.mark.slow
@FUZZ
@given(module_source())
def test_generated_modules(text):
    check_and_fix(text)


# ---------------------------------------------------------------------------------------------- mutated fixtures

MUTATIONS = ("delete", "duplicate", "swap", "literal", "truncate", "indent", "dedent", "token")
TOKENS = [
    ("float32", "float16"),
    ("float16", "bfloat16"),
    ("softmax", "sigmoid"),
    ("mixed_float16", "float32"),
    ("keras", "tf_keras"),
    ("(", ""),
    (")", ""),
    (":", ""),
    ("dtype=", ""),
    ("-1e9", "-1e4"),
    ("import ", ""),
]


@st.composite
def mutated_fixture(draw):
    path = draw(st.sampled_from(FIXTURES))
    lines = path.read_text().splitlines(keepends=True) or ["\n"]
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(MUTATIONS))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "literal":
            lines[i] = _replace_number(lines[i], draw(st.sampled_from(["0", "-1e9", "1e-12", "70000", "2", "-0.0"])))
        elif op == "truncate":
            text = "".join(lines)
            cut = draw(st.integers(0, len(text)))
            lines = text[:cut].splitlines(keepends=True) or ["\n"]
        elif op == "indent":
            lines[i] = "    " + lines[i]
        elif op == "dedent":
            lines[i] = lines[i].removeprefix("    ")
        elif op == "token":
            old, new = draw(st.sampled_from(TOKENS))
            lines[i] = lines[i].replace(old, new, 1)
    return "".join(lines)


def _replace_number(line: str, value: str) -> str:
    import re

    return re.sub(r"(?<![\w.])\d+(\.\d*)?(e-?\d+)?", value, line, count=1)


@pytest.mark.slow
@FUZZ
@given(mutated_fixture())
def test_mutated_fixtures(text):
    check_and_fix(text)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_fixture_and_its_fixes(path):
    """The unmutated corpus satisfies the same properties (and is a real, parseable input)."""
    text = path.read_text()
    assert parses(text)
    check_and_fix(text)


# ---------------------------------------------------------------------------------------------- artifact bytes

ARTIFACT_FUZZER = """
import contextlib, io, json, os, random, shutil, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
import keras
from mpdoctor.cli import main

work, count = sys.argv[1], int(sys.argv[2])
rng = random.Random(8)
values = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
values[0, 0] = 1e5
prefix = tf.train.Checkpoint(w=tf.Variable(values), step=tf.Variable(3, dtype=tf.int64)).write(
    os.path.join(work, "orig", "ckpt"))
model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4), keras.layers.Dense(2)])
h5 = os.path.join(work, "orig", "model.weights.h5")
model.save_weights(h5)
originals = {"index": prefix + ".index", "h5": h5}


def mutate(data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op, at = rng.choice(["flip", "byte", "truncate", "insert", "zero", "duplicate"]), rng.randrange(len(data) or 1)
        if op == "flip" and data:
            data[at] ^= 1 << rng.randrange(8)
        elif op == "byte" and data:
            data[at] = rng.randrange(256)
        elif op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op == "zero":
            n = rng.randint(1, 64)
            data[at:at + n] = bytes(len(data[at:at + n]))
        elif op == "duplicate":
            data[at:at] = data[at:at + rng.randint(1, 64)]
    return bytes(data)


for i in range(count):
    kind = "index" if i % 2 == 0 else "h5"
    case = os.path.join(work, f"case{i}")
    shutil.copytree(os.path.join(work, "orig"), case)
    target = os.path.join(case, os.path.relpath(originals[kind], os.path.join(work, "orig")))
    with open(target, "rb") as handle:
        data = handle.read()
    with open(target, "wb") as handle:
        handle.write(mutate(data))
    path = os.path.join(case, "ckpt") if kind == "index" else target
    print("CASE", i, kind, flush=True)  # names the case if the process dies on it
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["inspect", path, "--dtype", "float16"])
        except SystemExit as exc:
            code = exc.code
    print("RESULT " + json.dumps({"case": i, "kind": kind, "code": code, "out": out.getvalue()[-300:],
                                  "err": err.getvalue()}), flush=True)
    shutil.rmtree(case)
"""


def test_fuzzed_checkpoint_index_and_h5_bytes_give_a_result_or_one_clear_line(tmp_path, tensorflow):
    import json
    import subprocess
    import sys

    count = max(20, EXAMPLES // 5)
    result = subprocess.run(
        [sys.executable, "-c", ARTIFACT_FUZZER, str(tmp_path), str(count)],
        check=False,
        capture_output=True,
        text=True,
        timeout=1800,
        env=dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]),
        ),
    )
    cases = [line for line in result.stdout.splitlines() if line.startswith("CASE ")]
    results = [json.loads(line[7:]) for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and len(results) == count, (
        f"the process died on {cases[-1] if cases else 'setup'} (exit {result.returncode}): {result.stderr[-2000:]}"
    )
    outcomes = {"ok": 0, "error": 0}
    for r in results:
        if r["code"] in (0, 1):
            assert r["out"] and "Traceback" not in r["err"], r
            outcomes["ok"] += 1
        else:
            lines = r["err"].splitlines()
            assert r["code"] == 2 and len(lines) == 1, r
            assert lines[0].startswith("mpdoctor: error: ") and "internal error" not in lines[0], r
            outcomes["error"] += 1
    assert outcomes["error"] > 0  # the mutations do break files: the assertions above saw real errors


def test_h5py_failures_after_open_are_checkpoint_errors_and_our_own_bugs_are_not(tmp_path, tensorflow):
    """Regression (found by the artifact fuzzer): a .weights.h5 with one flipped bit in an object header opens,
    then h5py raises RuntimeError("... message not aligned") on a read, which was an internal error."""
    h5py = pytest.importorskip("h5py")
    import numpy as np

    from mpdoctor.artifacts.errors import CheckpointError
    from mpdoctor.artifacts.hdf5 import open_h5
    from mpdoctor.artifacts.locate import locate

    path = tmp_path / "model.weights.h5"
    with h5py.File(path, "w") as handle:
        handle.create_dataset("layers/dense/vars/0", data=np.ones((2, 2), np.float32))
    with pytest.raises(CheckpointError) as caught, open_h5(locate(str(path))) as (handle, _):
        handle["no/such/dataset"]  # h5py raises KeyError from its own code
    assert caught.value.path == str(path) and caught.value.problem.startswith("corrupt HDF5 file: ")
    with pytest.raises(KeyError), open_h5(locate(str(path))) as (handle, _):
        {}["ours"]  # a KeyError of mpdoctor's own code stays an internal error (a bug to report), not "corrupt"


def test_the_fuzzer_found_h5_file_is_one_clear_line(tmp_path, capfd, tensorflow):
    keras = pytest.importorskip("keras")
    from mpdoctor.cli import main

    keras.utils.set_random_seed(0)
    path = tmp_path / "model.weights.h5"
    keras.Sequential([keras.Input((6,)), keras.layers.Dense(4), keras.layers.Dense(2)]).save_weights(path)
    data = bytearray(path.read_bytes())
    if len(data) != 14512 or data[14338] != 0x18:
        pytest.skip("this Keras/h5py writes another layout; the fuzzer's reproducer does not apply")
    data[14338] ^= 1
    path.write_bytes(bytes(data))
    capfd.readouterr()
    assert main(["inspect", str(path), "--dtype", "float16"]) == 2
    out, err = capfd.readouterr()
    assert (
        out == ""
        and err == f"mpdoctor: error: {path}: corrupt HDF5 file: Object specific failed (message not aligned)\n"
    )
