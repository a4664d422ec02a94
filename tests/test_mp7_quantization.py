"""MP7xx (Keras 3 quantization): ground truth from running the fixtures on the installed Keras 3, and the trace
reporting the rule (never MP001) for the run's failures, including the ones the static pass cannot see."""

from __future__ import annotations

import textwrap

import pytest
from fixture_runner import FIXTURES
from trace_support import run_python, trace_check

pytestmark = pytest.mark.usefixtures("tensorflow")

# Positive fixtures that fail at run time, with the message the rule explains.
FAILING = {
    "MP701/global_int8_policy_keras3.py": "does not have a `_int8_call` method implemented",
    "MP701/global_float8_policy_object_keras3.py": "does not have a `_float8_call` method implemented",
    "MP701/custom_layer_quantized_dtype_keras3.py": "does not have a `_int8_call` method implemented",
    "MP702/int8_under_mixed_float16_keras3.py": "doesn't work well with compute_dtype='float16'",
    "MP702/int8_layer_dtype_float16_keras3.py": "doesn't work well with compute_dtype='float16'",
    "MP703/quantize_twice_keras3.py": "is already quantized with dtype_policy='int8_from_float32'",
    "MP703/quantize_unbuilt_keras3.py": "Cannot quantize a layer that isn't yet built",
}
# Negative Keras 3 fixtures: they run.
RUNNING = [
    "MP701/quantize_and_dense_loading_dtype_keras3.py",
    "MP702/built_in_float32_then_mixed_keras3.py",
    "MP703/quantize_fresh_models_keras3.py",
    "MP703/quantize_after_build_keras3.py",
    "MP704/subclass_with_quantize_keras3.py",
    "MP705/lora_and_float8_keras3.py",
    "MP705/float8_and_head_keras3.py",
]


@pytest.mark.parametrize("name", sorted(FAILING))
def test_positive_fixture_fails_as_the_rule_says(name):
    result = run_python(FIXTURES / name, legacy=False)
    assert result.returncode != 0 and FAILING[name] in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("name", RUNNING)
def test_negative_fixture_runs(name):
    result = run_python(FIXTURES / name, legacy=False)
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_dense_subclass_stays_float_after_quantize():
    """MP704's ground truth: the subclass is skipped (a warning), the built-in Dense is quantized."""
    result = run_python(FIXTURES / "MP704/dense_subclass_keras3.py", legacy=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "['float32', 'int8_from_float32']" in result.stdout
    assert "Layer ScaledDense does not have a `quantize` method implemented" in result.stderr


def test_fit_after_int8_quantize_leaves_the_kernels_and_lora_trains(tmp_path):
    """MP705's ground truth: fit changes only the biases of an int8 model; LoRA adapters train."""
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import keras
            import numpy as np

            def trained(lora):
                model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(3)])
                model.quantize("int8")
                if lora:
                    for layer in model.layers:
                        layer.enable_lora(2)
                before = {v.path: v.numpy().copy() for v in model.weights}
                model.compile(optimizer="adam", loss="mse")
                model.fit(np.random.rand(32, 4), np.random.rand(32, 3), epochs=2, verbose=0)
                after = {v.path: v.numpy() for v in model.weights}
                return {p.rsplit("/", 1)[-1] for p, v in before.items() if not np.array_equal(v, after[p])}

            print("PLAIN", sorted(trained(False)))
            print("LORA", sorted(trained(True)))
            """
        )
    )
    result = run_python(script, legacy=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "PLAIN ['bias']" in result.stdout
    assert "LORA ['bias', 'lora_kernel_a', 'lora_kernel_b']" in result.stdout


@pytest.mark.parametrize(
    "name,code,line",
    [
        ("MP701/global_int8_policy_keras3.py", "MP701", 4),
        ("MP702/int8_under_mixed_float16_keras3.py", "MP702", 6),
        ("MP703/quantize_twice_keras3.py", "MP703", 5),
    ],
)
def test_trace_reports_the_rule_not_mp001(name, code, line):
    diagnostics = trace_check(FIXTURES / name, legacy=False)
    found = {(d.code, d.location.line) for d in diagnostics}
    assert (code, line) in found and not any(d.code == "MP001" for d in diagnostics), found
    confirmed = next(d for d in diagnostics if d.code == code)
    assert "trace" in confirmed.passes


HIDDEN = {
    # The policy name is built at run time: only the run shows it.
    "MP701": """
        import keras
        import numpy as np

        MODE = "int8"
        keras.config.set_dtype_policy(f"{MODE}_from_float32")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.predict(np.ones((2, 4), "float32"), verbose=0)
        """,
    # The mode comes from a function argument.
    "MP702": """
        import keras

        def compress(model, mode):
            model.quantize(mode)

        keras.mixed_precision.set_global_policy("mixed_float16")
        compress(keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]), "int8")
        """,
    # A Sequential without an Input, made by a function, is not built when quantized.
    "MP703": """
        import keras

        def build():
            return keras.Sequential([keras.layers.Dense(8), keras.layers.Dense(3)])

        model = build()
        model.quantize("int8")
        """,
}


@pytest.mark.parametrize("code", sorted(HIDDEN))
def test_trace_finds_what_the_static_pass_cannot(tmp_path, code):
    path = tmp_path / f"{code.lower()}.py"
    path.write_text(textwrap.dedent(HIDDEN[code]))
    diagnostics = trace_check(path, legacy=False)
    codes = {d.code for d in diagnostics}
    assert code in codes and "MP001" not in codes, [(d.code, d.message) for d in diagnostics]
    assert all(d.passes == ("trace",) for d in diagnostics if d.code == code)


CHECKPOINTS = """
    import keras

    def build(bias=True):
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, use_bias=bias), keras.layers.Dense(3)])

    {save}
    {load}
    """


@pytest.mark.parametrize(
    "save,load,expected",
    [
        # int8 weights into the float model, and float weights into the int8 model: both raise, both are MP706.
        (
            'q = build()\nq.quantize("int8")\nq.save_weights("w.weights.h5")',
            'build().load_weights("w.weights.h5")',
            "MP706",
        ),
        (
            'build().save_weights("w.weights.h5")',
            'm = build()\nm.quantize("int8")\nm.load_weights("w.weights.h5")',
            "MP706",
        ),
        (
            'q = build()\nq.quantize("int4")\nq.save_weights("w.weights.h5")',
            'm = build()\nm.quantize("int8")\nm.load_weights("w.weights.h5")',
            "MP706",
        ),
        # A float architecture mismatch with the same shape of message stays MP001.
        ('build().save_weights("w.weights.h5")', 'build(bias=False).load_weights("w.weights.h5")', "MP001"),
        # Quantized the same way: it loads.
        (
            'q = build()\nq.quantize("int8")\nq.save_weights("w.weights.h5")',
            'm = build()\nm.quantize("int8")\nm.load_weights("w.weights.h5")',
            None,
        ),
    ],
    ids=["int8-into-float", "float-into-int8", "int4-into-int8", "float-bias-mismatch", "int8-into-int8"],
)
def test_quantized_weights_mismatch(tmp_path, save, load, expected):
    path = tmp_path / "ckpt.py"
    path.write_text(textwrap.dedent(CHECKPOINTS).format(save=save, load=load))
    result = run_python(path, legacy=False)
    assert (result.returncode == 0) == (expected is None), result.stderr[-1500:]
    codes = {d.code for d in trace_check(path, legacy=False) if d.code in ("MP001", "MP706")}
    assert codes == ({expected} if expected else set()), codes


GEMMA = """
    import keras
    import keras_hub
    import numpy as np


    def backbone():  # a tiny config: nothing is downloaded
        return keras_hub.models.GemmaBackbone(
            vocabulary_size=64, num_layers=1, num_query_heads=2, num_key_value_heads=1,
            hidden_dim=16, intermediate_dim=32, head_dim=8,
        )


    """
SAVE_AND_RELOAD = """
    inputs = {"token_ids": np.array([[1, 2, 3, 4]]), "padding_mask": np.array([[1, 1, 1, 1]])}
    for mode in ("int8", "int4"):
        model = backbone()
        model.quantize(mode)
        model.save_weights(f"gemma_{mode}.weights.h5")
        model.save(f"gemma_{mode}.keras")
        same = backbone()
        same.quantize(mode)
        same.load_weights(f"gemma_{mode}.weights.h5")
        reloaded = keras.models.load_model(f"gemma_{mode}.keras")
        print(mode, np.allclose(model(inputs), same(inputs)), np.allclose(model(inputs), reloaded(inputs)))
    """
MISMATCHED_RELOAD = """
    model = backbone()
    model.load_weights({path!r})  # int8 weights into the float backbone
    """


def test_keras_hub_backbone_quantized_saved_and_reloaded(tmp_path):
    """A keras-hub GemmaBackbone quantized int8 and int4, saved and reloaded: no finding; `inspect` lists its
    quantized layers; loading the int8 weights into the float backbone is MP706, not MP001."""
    pytest.importorskip("keras_hub")
    import json
    import subprocess
    import sys

    save = tmp_path / "save.py"
    save.write_text(textwrap.dedent(GEMMA) + textwrap.dedent(SAVE_AND_RELOAD))
    result = run_python(save, legacy=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "int8 True True" in result.stdout and "int4 True True" in result.stdout
    findings = [(d.code, d.message) for d in trace_check(save, legacy=False) if d.severity.value != "info"]
    assert findings == []

    for name, mode in (("gemma_int8.weights.h5", "int8"), ("gemma_int4.keras", "int4")):
        inspected = subprocess.run(
            [sys.executable, "-m", "mpdoctor", "inspect", "--format", "json", str(tmp_path / name)],
            capture_output=True,
            text=True,
        )
        quantized = json.loads(inspected.stdout)["quantized_layers"]
        layers = {q["layer"].rsplit("/", 1)[-1] for q in quantized}
        assert {"query_dense", "ffw_linear", "reversible_embedding"} <= layers, layers
        assert {q["mode"] for q in quantized} == {mode}

    mismatched = tmp_path / "mismatched.py"
    reload = textwrap.dedent(MISMATCHED_RELOAD).format(path=str(tmp_path / "gemma_int8.weights.h5"))
    mismatched.write_text(textwrap.dedent(GEMMA) + reload)
    result = run_python(mismatched, legacy=False)
    assert result.returncode != 0 and "could not be loaded" in result.stderr
    codes = {d.code for d in trace_check(mismatched, legacy=False)}
    assert "MP706" in codes and "MP001" not in codes, codes
