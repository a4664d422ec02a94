"""MP401 and the model-output finder: messages, fixes, edge cases. No TensorFlow import."""

from __future__ import annotations

import ast
import textwrap

import pytest

from mpdoctor.config import Config, apply_overrides
from mpdoctor.diagnostics import Confidence
from mpdoctor.engine import check_source
from mpdoctor.facts.schema import LayerRecord
from mpdoctor.fix.apply import apply_edits
from mpdoctor.registry import get_rule
from mpdoctor.static.context import StaticContext
from mpdoctor.static.semantic import Settings
from mpdoctor.static.topology import layer_inputs, model_output_layers

K3 = "import keras\nfrom keras import layers\n"
K2 = "import tf_keras as keras\nfrom tf_keras import layers\n"
MIXED = 'keras.mixed_precision.set_global_policy("mixed_float16")\n'


def check(source: str, code: str = "MP401", **options):
    source = textwrap.dedent(source)
    config = Config()
    apply_overrides(config, "test", select=[code], **options)
    diagnostics, error = check_source(source, "model.py", config)
    assert error is None, error.render()
    return [d for d in diagnostics if d.code == code]


def context(source: str) -> StaticContext:
    source = textwrap.dedent(source)
    return StaticContext("model.py", "model.py", source, ast.parse(source), Settings())


def outputs(source: str) -> list[tuple[str, int, str]]:
    """(kind, line, how) of every model output found."""
    ctx = context(source)
    result = []
    for layer, how in model_output_layers(ctx):
        kind = layer.kind if isinstance(layer, LayerRecord) else (ctx.call_name(layer) or "?")
        node = layer.node if isinstance(layer, LayerRecord) else layer
        result.append((kind, node.lineno, how))
    return result


def apply(source: str, fix) -> str:
    return apply_edits(source, fix.edits)


# ---------------------------------------------------------------- rule metadata


def test_rule_metadata_matches_the_catalogue():
    rule = get_rule("MP401")
    assert (rule.name, rule.severity.value, rule.passes, rule.fixable) == (
        "float16-output-activation",
        "error",
        "ST",
        True,
    )
    for code, name, severity in (
        ("MP402", "float16-model-output", "warning"),
        ("MP404", "non-finite-activation", "error"),
        ("MP405", "precision-divergence", "warning"),
    ):
        rule = get_rule(code)
        assert (rule.name, rule.severity.value, rule.passes) == (name, severity, "T")
        assert rule.what and rule.why and rule.bad and rule.good and rule.fix


# ---------------------------------------------------------------- model_output_layers


def test_outputs_of_sequential_list_and_layers_keyword():
    found = outputs(
        K3
        + """
a = keras.Sequential([keras.Input((4,)), layers.Dense(8), layers.Dense(2)])
b = keras.Sequential(layers=[layers.Dense(8), layers.Softmax()])
"""
    )
    assert [(k, line) for k, line, _ in found] == [("Dense", 4), ("Softmax", 5)]
    assert found[0][2] == "last layer of Sequential([...])"


def test_outputs_of_model_add_follow_branches_and_loops():
    found = outputs(
        K3
        + """
def build(n, deep):
    model = keras.Sequential()
    model.add(layers.Dense(64))
    for units in (64, 32):
        model.add(layers.Dense(units))
    if n == 2:
        model.add(layers.Dense(1, activation="sigmoid"))
    elif n > 2:
        model.add(layers.Dense(n, activation="softmax"))
    return model
"""
    )
    # both branches are outputs; with neither taken (n < 2) the loop's Dense is, and the first Dense too when a
    # loop runs zero times (the static pass does not count iterations)
    assert sorted(line for _, line, _ in found) == [6, 8, 10, 12]


def test_add_after_rebinding_belongs_to_the_new_model_and_pop_gives_up():
    found = outputs(
        K3
        + """
model = keras.Sequential()
model.add(layers.Dense(3))
model = keras.Sequential()
model.add(layers.Dense(5))
other = keras.Sequential([layers.Dense(4), layers.Dense(6)])
other.pop()
"""
    )
    assert [line for _, line, _ in found] == [5, 7]


def test_outputs_of_functional_models_list_dict_and_helpers():
    found = outputs(
        K3
        + """
def head(x, n):
    return layers.Dense(n, activation="softmax", name="head")(x)

inp = keras.Input((8,))
h = layers.Dense(16)(inp)
cls = head(h, 3)
reg_layer = layers.Dense(1)
m1 = keras.Model(inputs=inp, outputs={"cls": cls, "reg": reg_layer(h)})
m2 = keras.Model(inp, [keras.ops.softmax(h)])
"""
    )
    kinds = [(k, line) for k, line, _ in found]
    assert kinds == [("Dense", 5), ("Dense", 10), ("keras.ops.softmax", 12)]


def test_outputs_of_subclassed_model_and_nested_sequential():
    found = outputs(
        K3
        + """
class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.body = layers.Dense(16)
        self.head = keras.Sequential([layers.Dense(4), layers.Softmax()])

    def call(self, x):
        y = self.body(x)
        return self.head(y)


class Block(layers.Layer):
    def __init__(self):
        super().__init__()
        self.score = layers.Dense(1, activation="sigmoid")

    def call(self, x):
        return self.score(x)


net = Net()
"""
    )
    assert [(k, line, how) for k, line, how in found] == [("Softmax", 8, "last layer of Sequential([...])")]


def test_blocks_of_other_models_are_not_outputs():
    found = outputs(
        K3
        + """
def se(c):
    return keras.Sequential([layers.Dense(c // 4), layers.Dense(c, activation="sigmoid")])

gate = keras.Sequential([layers.Dense(16, activation="sigmoid")])
inp = keras.Input((16,))
x = layers.Multiply()([inp, gate(inp)])
x = layers.Multiply()([x, se(16)(x)])
model = keras.Model(inp, layers.Dense(2)(x))
model.compile("adam", "mse")
"""
    )
    assert [(k, line) for k, line, _ in found] == [("Dense", 11)]


def test_model_called_in_a_training_loop_is_still_a_model():
    found = outputs(
        K3
        + """
import tensorflow as tf
model = keras.Sequential([keras.Input((4,)), layers.Dense(3, activation="softmax")])
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(model(tf.zeros((1, 4))))
grads = tape.gradient(loss, model.trainable_variables)
"""
    )
    assert [line for _, line, _ in found] == [5]


def test_applications_are_outputs():
    found = outputs(K3 + "base = keras.applications.ResNet50(weights=None)\n")
    assert found == [("keras.applications.ResNet50", 3, "classifier of a keras.applications model")]


def test_layer_inputs_of_a_split_activation_head():
    ctx = context(
        K3
        + """
inp = keras.Input((8,))
logits = layers.Dense(3)(inp)
out = layers.Activation("softmax", dtype="float32")(logits)
seq = keras.Sequential([keras.Input((8,)), layers.Dense(5), layers.Softmax(dtype="float32")])
model = keras.Model(inp, out)
"""
    )
    heads = {layer.node.lineno: layer for layer, _ in model_output_layers(ctx) if isinstance(layer, LayerRecord)}
    assert [p.node.lineno for p in layer_inputs(ctx, heads[6])] == [5]
    assert [p.kind for p in layer_inputs(ctx, heads[7])] == ["Dense"]


# ---------------------------------------------------------------- MP401 diagnostics


def test_message_location_and_fix():
    source = textwrap.dedent(
        K3
        + MIXED
        + """
model = keras.Sequential([
    keras.Input((4,)),
    layers.Dense(10, activation="softmax"),
])
"""
    )
    [d] = check(source)
    assert (d.location.line, d.location.column) == (7, 5)
    assert "Dense" in d.message and "softmax" in d.message and "mixed_float16" in d.message
    assert "float16" in d.message and 'dtype="float32"' in d.message
    assert d.confidence is Confidence.HIGH
    fixed = apply(source, d.fix)
    assert 'layers.Dense(10, activation="softmax", dtype="float32"),' in fixed
    ast.parse(fixed)
    assert check(fixed) == []
    assert apply(fixed, type(d.fix)("noop", ())) == fixed


def test_fix_replaces_a_float16_dtype():
    source = textwrap.dedent(
        K3
        + """
model = keras.Sequential([keras.Input((4,)), layers.Dense(2, activation="sigmoid", dtype="mixed_float16")])
"""
    )
    [d] = check(source)
    fixed = apply(source, d.fix)
    assert 'dtype="float32")' in fixed and "mixed_float16" not in fixed
    assert check(fixed) == []


@pytest.mark.parametrize(
    "activation, expected",
    [
        ('"softmax"', "softmax"),
        ('"sigmoid"', "sigmoid"),
        ('"log_softmax"', "log_softmax"),
        ('"exponential"', "exp"),
        ("keras.activations.softmax", "softmax"),
        ("keras.ops.sigmoid", "sigmoid"),
    ],
)
def test_activation_spellings(activation, expected):
    [d] = check(K3 + MIXED + f"m = keras.Sequential([keras.Input((3,)), layers.Dense(2, activation={activation})])\n")
    assert f"computes {expected} in float16" in d.message


@pytest.mark.parametrize(
    "head",
    [
        'layers.Dense(2, activation="relu")',
        "layers.Dense(2)",
        'layers.Dense(2, activation="softmax", dtype="float32")',
        'layers.Activation("softmax", dtype=keras.mixed_precision.Policy("float32"))',
        'layers.Softmax(dtype="float32")',
    ],
)
def test_heads_that_are_fine(head):
    assert check(K3 + MIXED + f"m = keras.Sequential([keras.Input((3,)), layers.Dense(4), {head}])\n") == []


def test_tf_nn_activation_given_positionally_and_tf_keras():
    [d] = check(
        K2
        + "import tensorflow as tf\n"
        + MIXED
        + "m = keras.Sequential([layers.Dense(4, input_shape=(3,)), layers.Dense(2, tf.nn.softmax)])\n"
    )
    assert d.location.line == 5


def test_bfloat16_message_is_about_rounding():
    [d] = check(
        K3
        + 'keras.mixed_precision.set_global_policy("mixed_bfloat16")\n'
        + 'm = keras.Sequential([keras.Input((3,)), layers.Dense(1, activation="sigmoid")])\n'
    )
    assert "bfloat16" in d.message and "65504" not in d.message


def test_uncertain_policy_lowers_confidence():
    [d] = check(
        K3
        + """
def build(policy):
    return keras.Sequential([keras.Input((3,)), layers.Dense(2, activation="softmax")])

keras.mixed_precision.set_global_policy("mixed_float16")
a = build(1)
keras.mixed_precision.set_global_policy("float32")
b = build(2)
"""
    )
    assert d.confidence is Confidence.MEDIUM


def test_no_float16_policy_is_quiet_and_assumed_policy_is_used():
    source = K3 + 'm = keras.Sequential([keras.Input((3,)), layers.Dense(2, activation="softmax")])\n'
    assert check(source) == []
    assert len(check(source, assume_policy="mixed_float16")) == 1


def test_op_on_float16_logits_fix_goes_on_the_producer():
    source = textwrap.dedent(
        K2
        + "import tensorflow as tf\n"
        + MIXED
        + """
inp = keras.Input((8,))
logits = layers.Dense(3)(inp)
model = keras.Model(inp, tf.nn.softmax(logits))
"""
    )
    [d] = check(source)
    assert d.location.line == 8 and "tf.nn.softmax" in d.message and "Dense" in d.message
    fixed = apply(source, d.fix)
    assert 'layers.Dense(3, dtype="float32")(inp)' in fixed
    assert check(fixed) == []


def test_tf_op_on_keras3_functional_tensor_is_left_to_the_trace():
    source = (
        K3
        + "import tensorflow as tf\n"
        + MIXED
        + """
inp = keras.Input((8,))
model = keras.Model(inp, tf.nn.softmax(layers.Dense(3)(inp)))
"""
    )
    assert check(source) == []


def test_op_on_a_cast_is_quiet():
    source = (
        K3
        + MIXED
        + """
inp = keras.Input((8,))
x = keras.ops.cast(layers.Dense(3)(inp), "float32")
model = keras.Model(inp, keras.ops.softmax(x))
"""
    )
    assert check(source) == []


@pytest.mark.parametrize("keras_import, keras3", [(K3, True), (K2, False)])
def test_timedistributed_fix_sets_both_layers(keras_import, keras3):
    source = textwrap.dedent(
        keras_import
        + MIXED
        + """
model = keras.Sequential([
    keras.Input((5, 4)),
    layers.TimeDistributed(layers.Dense(3, activation="softmax")),
])
"""
    )
    [d] = check(source)
    fixed = apply(source, d.fix)
    assert 'layers.TimeDistributed(layers.Dense(3, activation="softmax", dtype="float32"), dtype="float32")' in fixed
    assert check(fixed) == []
    # Measured: Keras 3 needs dtype on the wrapper, tf_keras on the inner layer.
    inner_only = source.replace('activation="softmax")', 'activation="softmax", dtype="float32")')
    assert bool(check(inner_only)) is keras3


@pytest.mark.parametrize(
    "call, reported",
    [
        ("keras.applications.MobileNetV2(weights=None, input_shape=(96, 96, 3))", True),
        ("keras.applications.MobileNetV2(None, 1.0, False)", False),
        ("keras.applications.mobilenet_v2.MobileNetV2(include_top=False, weights=None)", False),
        ("keras.applications.ResNet50(False, None)", False),
        ("keras.applications.ResNet50(weights=None, classifier_activation=None)", False),
        ('keras.applications.ResNet50(weights=None, classifier_activation="sigmoid")', True),
        ("keras.applications.ResNet50(**kwargs)", False),
        ("keras.applications.resnet50.preprocess_input(x)", False),
    ],
)
def test_applications(call, reported):
    diagnostics = check(K3 + MIXED + f"m = {call}\n")
    assert bool(diagnostics) is reported
    if reported:
        assert diagnostics[0].fix is None and "include_top=False" in diagnostics[0].message


def test_applications_under_float32_are_quiet():
    assert check(K3 + "m = keras.applications.ResNet50(weights=None)\n") == []


def test_hub_seed_head_without_activation_is_not_mp401():
    source = """
import tensorflow as tf
import tensorflow_hub as hub
tf.keras.mixed_precision.set_global_policy('mixed_float16')
model = tf.keras.Sequential([
    tf.keras.layers.InputLayer(input_shape=(224, 224, 3)),
    hub.KerasLayer("https://tfhub.dev/google/imagenet/resnet_v1_50/feature_vector/5", trainable=False),
    tf.keras.layers.Dropout(rate=0.2),
    tf.keras.layers.Dense(2, kernel_regularizer=tf.keras.regularizers.l2(0.0001)),
])
"""
    assert check(source) == []


def test_noqa_suppresses():
    source = K3 + MIXED + 'm = keras.Sequential([layers.Dense(2, activation="softmax")])  # noqa: MP401\n'
    assert check(source) == []
