"""MP601 (and the docs of MP602/MP603): messages, locations, edge cases. No TensorFlow import."""

from __future__ import annotations

import textwrap

import pytest

from mpdoctor.config import Config, apply_overrides
from mpdoctor.engine import check_source
from mpdoctor.registry import get_rule

K3 = "import keras\nfrom keras import layers\n"
MIXED = 'keras.mixed_precision.set_global_policy("mixed_float16")\n'


def check(source: str, **options):
    source = textwrap.dedent(source)
    config = Config()
    apply_overrides(config, "test", select=["MP601"], **options)
    diagnostics, error = check_source(source, "model.py", config)
    assert error is None, error.render()
    return [d for d in diagnostics if d.code == "MP601"]


def test_rule_metadata_matches_the_catalogue():
    rule = get_rule("MP601")
    assert (rule.name, rule.severity.value, rule.passes, rule.fixable) == ("tensor-core-alignment", "info", "ST", False)
    for code, name in (("MP602", "float64-input"), ("MP603", "no-fast-float16-hardware")):
        rule = get_rule(code)
        assert (rule.name, rule.severity.value, rule.passes, rule.fixable) == (name, "info", "T", False)


def test_message_names_layer_argument_and_next_multiple_at_the_literal():
    source = K3 + MIXED + "m = keras.Sequential([keras.Input((4,)), layers.Dense(units=100), layers.Dense(2)])\n"
    [d] = check(source)
    assert d.message.startswith("Dense units=100 is not a multiple of 8")
    assert "mixed_float16" in d.message and "104" in d.message
    line = source.splitlines()[d.location.line - 1]
    assert line[d.location.column - 1 : d.location.end_column - 1] == "100"
    assert d.fix is None


@pytest.mark.parametrize(
    "layer, reported",
    [
        ("layers.Conv1D(12, 3)", True),
        ("layers.Conv3D(filters=20, kernel_size=3)", True),
        ("layers.Conv2DTranspose(12, 3)", True),
        ("layers.SeparableConv1D(12, 3)", True),
        ("layers.DepthwiseConv2D(3)", False),
        ("layers.Embedding(1001, 64)", True),
        ("layers.Embedding(1000, output_dim=65)", True),
        ("layers.Dense(7)", False),  # below 8: nothing to pad
        ("layers.Dense(128)", False),
        ("layers.Dense(100, dtype='float32')", False),
        ("layers.Dense(True)", False),
        ("layers.LSTM(100)", False),  # not in the checked set
    ],
)
def test_layers(layer, reported):
    source = K3 + MIXED + f"m = keras.Sequential([keras.Input((4, 4, 4, 4)), {layer}, layers.Dense(2)])\n"
    assert bool(check(source)) is reported


def test_output_layer_and_the_logits_layer_behind_a_float32_activation_are_skipped():
    source = (
        K3
        + MIXED
        + """
inp = keras.Input((16,))
x = layers.Dense(100)(inp)
logits = layers.Dense(10)(x)
out = layers.Activation("softmax", dtype="float32")(logits)
model = keras.Model(inp, out)
regression = keras.Sequential([keras.Input((16,)), layers.Dense(13)])
"""
    )
    assert [d.location.line for d in check(source)] == [6]


def test_module_constant_is_reported_at_its_literal_unless_shadowed():
    source = (
        K3
        + MIXED
        + """
HIDDEN = 100


def build(units=HIDDEN):
    return keras.Sequential([keras.Input((4,)), layers.Dense(units), layers.Dense(2)])


def build2():
    return keras.Sequential([keras.Input((4,)), layers.Dense(HIDDEN), layers.Dense(2)])
"""
    )
    [d] = check(source)
    assert d.location.line == 5 and "Dense units=100" in d.message


def test_no_float16_policy_or_policy_set_after_is_quiet():
    body = (
        "m = keras.Sequential([keras.Input((4,)), layers.Dense(100), layers.Dense(2)])\nm.fit(x, y, batch_size=100)\n"
    )
    assert check(K3 + body) == []
    assert check(K3 + body + MIXED) == []
    assert len(check(K3 + body, assume_policy="mixed_bfloat16")) == 2


def test_batch_size():
    source = (
        K3
        + MIXED
        + """
model.fit(x, y, batch_size=100, epochs=3)
model.fit(x, y, batch_size=128)
model.fit(x, y, batch_size=4)
model.fit(x, y, batch_size=batch)
"""
    )
    [d] = check(source)
    assert d.message.startswith("batch_size=100 is not a multiple of 8") and "104" in d.message


def test_batch_size_with_a_per_layer_float16_policy():
    source = (
        K3
        + """
model = keras.Sequential([keras.Input((4,)), layers.Dense(64, dtype="mixed_float16"), layers.Dense(2)])
model.fit(x, y, batch_size=30)
"""
    )
    [d] = check(source)
    assert "batch_size=30" in d.message and d.confidence.value == "medium"
