"""The static and trace forms of a rule state the same fact in the same words: for every rule that has both forms,
one fixture is checked by the static pass alone and by the trace checks alone, and both messages must contain the
rule's shared wording of the fact and end with the same advice. The trace adds what it observed (layer and model
names, the exception of the run), the static pass what it read (lines, constructs); neither rewords the fact."""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from mpdoctor.config import Config
from mpdoctor.engine import TraceOptions, check_source
from mpdoctor.registry import hooks, static_checks
from mpdoctor.rules import (
    mp101_policy_after_layers,
    mp102_pure_float16_policy,
    mp104_hub_on_keras3,
    mp201_savedmodel_input,
    mp207_cast_undone,
    mp301_checkpoint_dtype,
    mp401_float16_outputs,
    mp403_unsafe_constant,
    mp406_dtype_conflict,
    mp702_quantize_calls,
)
from mpdoctor.static.semantic import Settings
from mpdoctor.trace.checks import trace_diagnostics

ROOT = Path(__file__).resolve().parents[1]
FEATURE_EXTRACTOR = ROOT / "examples" / "savedmodels" / "feature_extractor"
HUB_ON_KERAS3 = f"""\
import keras
import tensorflow_hub as hub

model = keras.Sequential([
    keras.Input((224, 224, 3)),
    hub.KerasLayer({str(FEATURE_EXTRACTOR)!r}),
])
"""
# The static pass finds the first literal; the one inside the lambda only the traced float16 graph shows.
MASKED_SCORES = """\
import keras
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")


class MaskedScores(keras.layers.Layer):
    def call(self, scores):
        masked = scores + tf.cast(scores < 0, scores.dtype) * -1e9
        shifted = (lambda t: t + -1e9)(scores)
        return masked + shifted


def build_model():
    inputs = keras.Input((8,))
    outputs = keras.layers.Activation("linear", dtype="float32")(MaskedScores()(keras.layers.Dense(8)(inputs)))
    return keras.Model(inputs, outputs)
"""

# code -> (fixture: a path from the repository root or inline source, tf_keras?, static line, trace line, the
# wording both forms must contain).
CASES = {
    "MP101": (
        "tests/fixtures/MP101/builder_called_before_policy_keras2.py",
        True,
        17,
        17,
        [
            'set_global_policy() sets "mixed_float16" only after ',
            mp101_policy_after_layers.set_too_late("", "mixed_float16", "", "float32").split(": ", 1)[1],
        ],
    ),
    "MP102": (
        "tests/fixes/MP102/float16_policy_fit_keras3.in.py",
        False,
        5,
        5,
        [mp102_pure_float16_policy.pure_policy("float16")],
    ),
    "MP104": (HUB_ON_KERAS3, False, 6, 6, [mp104_hub_on_keras3.hub_on_keras3("").split(": ;")[0]]),
    "MP201": (
        "examples/hub_seed.py",
        True,
        31,
        31,
        [
            mp201_savedmodel_input.casts_to_float16("", "float16", "mixed_float16", False).strip(),
            mp201_savedmodel_input.ADVICE,
        ],
    ),
    "MP207": (
        "tests/fixes/MP207/sequential_ops_cast_keras3.in.py",
        True,
        11,
        11,
        [
            " is undone: ",
            mp207_cast_undone.cast_undone("", "", "mixed_float16", "float16", "").split(", ", 1)[1].split(" on ")[0],
            " instead to compute it in float32",
        ],
    ),
    "MP301": (
        "tests/fixes/MP301/seed003_saver_keras2.in.py",
        True,
        30,
        30,
        [mp301_checkpoint_dtype.mismatch("float16"), mp301_checkpoint_dtype.advice("saver", "float16")],
    ),
    "MP401": (
        "tests/fixtures/MP401/sequential_add_branches_keras2.py",
        True,
        20,
        20,
        [mp401_float16_outputs.float16_output("sigmoid", "float16", "mixed_float16")],
    ),
    "MP403": (
        MASKED_SCORES,
        False,
        9,
        10,
        [mp403_unsafe_constant.out_of_range("overflow", True), mp403_unsafe_constant.advice("overflow")],
    ),
    "MP701": (
        "tests/fixtures/MP701/global_int8_policy_keras3.py",
        False,
        4,
        4,
        ['global policy "int8_from_float32" is a quantized policy: ', "raise NotImplementedError"],
    ),
    "MP702": (
        "tests/fixtures/MP702/int8_under_mixed_float16_keras3.py",
        False,
        6,
        6,
        ['quantize("int8") on layers computing in float16', mp702_quantize_calls.FLOAT16_ADVICE],
    ),
    "MP703": (
        "tests/fixtures/MP703/quantize_twice_keras3.py",
        False,
        5,
        5,
        [mp702_quantize_calls.ALREADY_QUANTIZED, mp702_quantize_calls.REQUANTIZE_ADVICE],
    ),
    "MP406": (  # the run confirms the static finding in the layer that raised, at its line (one per root cause)
        "tests/fixtures/MP406/pure_float16_weight_keras2.py",
        True,
        10,
        10,
        [" meets the float16 tensors of ", mp406_dtype_conflict.ADVICE],
    ),
}


# Rules whose two forms state different facts: MP003's static form is a pin that disagrees with the code, its trace
# form a run that failed on an API the installed TensorFlow lacks ("cannot trace").
DIFFERENT_FACTS = {"MP003"}


def test_every_rule_with_both_forms_has_a_case():
    static = {code for check in static_checks() for code in check.codes}
    traced = {code for hook in hooks("trace") for code in hook.codes}
    assert set(CASES) == (static & traced) - DIFFERENT_FACTS


def _messages(code: str, tmp_path: Path, monkeypatch) -> tuple[str, str]:
    fixture, legacy, static_line, trace_line, _ = CASES[code]
    if "\n" in fixture:
        path = tmp_path / "fixture.py"
        path.write_text(textwrap.dedent(fixture))
    else:
        path = ROOT / fixture
    text = path.read_text()
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1" if legacy else "0")
    monkeypatch.chdir(ROOT)
    config = Config()
    static, error = check_source(text, path.name, config, path=str(path), trace=TraceOptions(enabled=False))
    assert error is None
    traced, _ = trace_diagnostics(
        str(path), path.name, text, ast.parse(text), config, Settings(), TraceOptions(enabled=True)
    )
    [static_message] = [d.message for d in static if d.code == code and d.location.line == static_line]
    [trace_message] = [d.message for d in traced if d.code == code and d.location.line == trace_line]
    return static_message, trace_message


def _advice(message: str) -> str:
    """The last clause, names of the user's objects left out (`dense_1` or Dense: what each pass can name)."""
    return re.sub(r"`[^`]*`|\b[A-Z]\w+\b", "<name>", message.rsplit("; ", 1)[-1])


@pytest.mark.parametrize("code", sorted(CASES))
def test_static_and_trace_messages_share_their_wording(code, tmp_path, monkeypatch):
    static, traced = _messages(code, tmp_path, monkeypatch)
    for phrase in CASES[code][4]:
        assert phrase in static, f"static: {static}\nmissing: {phrase}"
        assert phrase in traced, f"trace: {traced}\nmissing: {phrase}"
    assert _advice(static) == _advice(traced), f"static: {static}\ntrace:  {traced}"
    if code == "MP401":  # a sigmoid head is described as a sigmoid, never with the softmax text
        assert "softmax" not in static and "softmax" not in traced and "probabilities below" not in traced
