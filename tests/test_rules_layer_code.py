"""MP403 / MP406 / MP407 (user code computing in float16): rule data, messages, fixes and edge cases."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

import pytest

from mpdoctor.config import Config
from mpdoctor.diagnostics import Confidence, Severity
from mpdoctor.engine import check_source
from mpdoctor.fix.apply import apply_fixes
from mpdoctor.registry import get_rule

CODES = ("MP403", "MP406", "MP407")

K2 = """\
import tensorflow as tf
import tf_keras as keras
from tf_keras import layers
keras.mixed_precision.set_global_policy("{policy}")
"""

K3 = """\
import keras
import tensorflow as tf
from keras import layers, ops
keras.mixed_precision.set_global_policy("{policy}")
"""


def check(body: str, header: str = K2, policy: str = "mixed_float16", codes=CODES):
    text = header.format(policy=policy) + textwrap.dedent(body)
    diagnostics, error = check_source(text, "model.py", Config())
    assert error is None, error.render()
    return text, [d for d in diagnostics if d.code in codes]


def fix_all(text: str, diagnostics) -> str:
    fixed = apply_fixes(text, diagnostics)
    ast.parse(fixed)
    return fixed


MASK_LAYER = """
class Masked(layers.Layer):
    def call(self, scores, mask):
        m = tf.cast(mask, scores.dtype)
        return tf.nn.softmax(scores + (1.0 - m) * -1e9)

out = Masked()(keras.Input((4,)), keras.Input((4,)))
"""


# ------------------------------------------------------------------ rule data


@pytest.mark.parametrize(
    "code,name,severity,fixable",
    [
        ("MP403", "float16-unsafe-constant", Severity.ERROR, True),
        ("MP406", "dtype-conflict-in-layer", Severity.ERROR, True),
        ("MP407", "unsafe-op-in-float16", Severity.WARNING, False),
    ],
)
def test_rule_data_matches_rules_md(code, name, severity, fixable):
    rule = get_rule(code)
    assert (rule.name, rule.severity, rule.passes, rule.fixable) == (name, severity, "ST", fixable)
    for text in (rule.what, rule.why, rule.bad, rule.good, rule.fix):
        assert text.strip()


def test_mp407_docs_name_the_tf_deny_list():
    what = get_rule("MP407").what
    for op in ("Exp", "Pow", "Mean", "Sum", "SoftmaxCrossEntropyWithLogits"):
        assert op in what
    assert "softplus" in what  # documented as deliberately not flagged


# ------------------------------------------------------------------ MP403


def test_mask_literal_message_and_fix():
    text, found = check(MASK_LAYER)
    (d,) = found
    assert d.code == "MP403" and d.confidence == Confidence.HIGH
    assert "`-1e9`" in d.message and "-inf" in d.message and "`Masked`" in d.message
    assert "mixed_float16" in d.message
    assert d.fix.applicability == "safe"  # dtype-aware: float32 code keeps its -1e9
    fixed = fix_all(text, found)
    assert '(-1e4 if self.compute_dtype == "float16" else -1e9)' in fixed
    assert check(fixed.split("\n", 4)[4])[1] == []  # fixed code is clean (header re-added by check)


def test_mask_constant_outside_a_layer_gets_a_fixed_unsafe_value():
    text, found = check("""
    NEG = -1e9

    class Masked(layers.Layer):
        def call(self, scores):
            return tf.nn.softmax(scores + NEG)

    out = Masked()(keras.Input((4,)))
    """)
    (d,) = found
    assert d.fix.applicability == "unsafe" and fix_all(text, found).count("NEG = -1e4") == 1


def test_module_constant_is_reported_at_its_definition_with_the_use_line():
    _text, found = check("""
    NEG = -1e9

    class Masked(layers.Layer):
        def call(self, scores):
            return scores + NEG
    layer = Masked()
    """)
    (d,) = found
    assert d.location.line == 6 and "used on line 10" in d.message


def test_init_default_stored_on_self_is_reported_at_the_default():
    text, found = check(
        """
    class Norm(layers.Layer):
        def __init__(self, eps=1e-12, **kw):
            super().__init__(**kw)
            self.eps = eps
        def call(self, x):
            return x * tf.math.rsqrt(tf.reduce_mean(x, axis=-1, keepdims=True) + self.eps)
    layer = Norm()
    """,
        codes=("MP403",),
    )
    (d,) = found
    assert d.location.line == 7 and "becomes 0" in d.message
    assert "1e-7" in fix_all(text, found)


@pytest.mark.parametrize(
    "body",
    [
        # built-in layers compute their statistics in float32
        "layer = layers.LayerNormalization(epsilon=1e-12)",
        """
    class Block(layers.Layer):
        def __init__(self):
            super().__init__()
            self.ln = layers.LayerNormalization(epsilon=1e-12)
            self.bn = layers.BatchNormalization(epsilon=1e-12)
        def call(self, x):
            return self.bn(self.ln(x))
    b = Block()
    """,
        # float32 islands
        """
    class M(layers.Layer):
        def call(self, x):
            x32 = tf.cast(x, tf.float32)
            y = x32 * -1e9 + tf.constant(-1e9, dtype=tf.float32)
            return tf.cast(tf.maximum(y, 1e-12), x.dtype)
    m = M()
    """,
        # clipping bound, representable values, infinities
        """
    class M(layers.Layer):
        def call(self, x):
            return tf.maximum(x, -1e9) + tf.where(x > 0, x, -1e4) + tf.maximum(x, float("-inf")) + x * 1e-5
    m = M()
    """,
        # instances that all compute in float32
        MASK_LAYER.replace("Masked()(", 'Masked(dtype="float32")('),
        # int literals and Python-only arithmetic
        """
    class M(layers.Layer):
        def __init__(self, units):
            super().__init__()
            self.units = units
        def call(self, x):
            big = self.units * 1e9
            return tf.reshape(x, [-1, 100000]) * (self.units ** -0.5)
    m = M(4)
    """,
    ],
)
def test_mp403_negatives(body):
    assert check(body, codes=("MP403",))[1] == []


def test_bfloat16_and_float32_policies_are_not_flagged():
    for policy in ("mixed_bfloat16", "bfloat16", "float32"):
        assert check(MASK_LAYER, policy=policy, codes=("MP403",))[1] == []


def test_tf_keras_non_first_argument_is_medium_confidence():
    _, found = check(
        """
    class Masked(layers.Layer):
        def call(self, scores, mask):
            return scores + (1.0 - mask) * -1e9
    m = Masked()
    """,
        codes=("MP403",),
    )
    (d,) = found
    # Keras 2 autocasts only `scores`: a float32 `mask` keeps `(1.0 - mask) * -1e9` in float32 (then the sum raises
    # a dtype error instead); a float16 or NumPy mask gives -inf. Keras 3 casts both: HIGH there.
    assert d.confidence == Confidence.MEDIUM
    _, found3 = check(
        """
    class Masked(layers.Layer):
        def call(self, scores, mask):
            return scores + (1.0 - mask) * -1e9
    m = Masked()
    """,
        header=K3,
        codes=("MP403",),
    )
    assert [d.confidence for d in found3] == [Confidence.HIGH]


def test_helper_method_and_lambda_function_regions():
    _, found = check(
        """
    def mask_fn(t):
        return tf.where(t > 0, t, tf.constant(-1e9, dtype=t.dtype))

    class M(layers.Layer):
        def _safe_div(self, a, b):
            return a / (b + 1e-12)
        def call(self, x):
            return self._safe_div(x, tf.reduce_max(x))
    y = layers.Lambda(mask_fn)(M()(keras.Input((3,))))
    """,
        codes=("MP403",),
    )
    assert sorted(d.location.line for d in found) == [7, 11]
    assert any("`_safe_div` of layer `M`" in d.message for d in found)


def test_keras3_ops_spellings():
    _, found = check(
        """
    class M(layers.Layer):
        def call(self, x, mask):
            x = ops.where(mask > 0, x, -1e9)
            return x / ops.maximum(ops.sum(x), 1e-12)
    m = M()
    """,
        header=K3,
        codes=("MP403",),
    )
    assert len(found) == 2 and all(d.confidence == Confidence.HIGH for d in found)


# ------------------------------------------------------------------ MP406


def test_mp406_fixes_use_the_compute_dtype_and_parse():
    text, found = check(
        """
    class Noisy(layers.Layer):
        def build(self, input_shape):
            self.v = tf.Variable(tf.ones(input_shape[-1:]))
        def call(self, x):
            noise = tf.random.normal(tf.shape(x), stddev=0.1)
            c = tf.constant(2.0, dtype=tf.float32)
            x32 = tf.cast(x, tf.float32)
            return (x + noise) * c * self.v + x32 + tf.math.sqrt(8.0) * x
    n = Noisy()
    y = layers.Lambda(lambda t: t * tf.ones((3,)))(keras.Input((3,)))
    """,
        codes=("MP406",),
    )
    assert len(found) == 6
    fixed = fix_all(text, found)
    assert "tf.random.normal(tf.shape(x), stddev=0.1, dtype=self.compute_dtype)" in fixed
    assert "tf.constant(2.0, dtype=self.compute_dtype)" in fixed
    assert "tf.cast(x, self.compute_dtype)" in fixed
    assert "tf.math.sqrt(tf.cast(8.0, self.compute_dtype))" in fixed
    assert "tf.ones((3,), dtype=t.dtype)" in fixed
    assert {d.fix.applicability for d in found if "Variable" in d.message or "cast" in d.message} == {"unsafe"}
    assert all("TensorFlow raises" in d.message for d in found)


def test_float32_add_weight_autocasts_under_mixed_but_not_pure_float16():
    body = """
    class T(layers.Layer):
        def build(self, s):
            self.t = self.add_weight(name="t", shape=(), dtype="float32")
        def call(self, x):
            return x / self.t
    t = T()
    """
    assert check(body, codes=("MP406",))[1] == []
    (d,) = check(body, policy="float16", codes=("MP406",))[1]
    assert "does not autocast" in d.message and d.location.line == 8


def test_keras3_ops_promote_silently_with_medium_confidence():
    _, found = check(
        """
    class N(layers.Layer):
        def call(self, x):
            return ops.add(x, keras.random.normal(ops.shape(x)))
    n = N()
    """,
        header=K3,
        codes=("MP406",),
    )
    (d,) = found
    assert "silently promotes" in d.message and d.confidence == Confidence.MEDIUM


def test_floatx_and_self_dtype():
    _, found = check(
        """
    from tf_keras import backend as K
    class L(layers.Layer):
        def call(self, x):
            a = tf.ones(tf.shape(x), dtype=K.floatx())
            b = tf.cast(x, self.dtype)
            return x * a + b * x
    l = L()
    """,
        codes=("MP406",),
    )
    messages = sorted(d.message for d in found)
    assert len(found) == 2
    assert any("floatx()" in m for m in messages) and any("variable dtype" in m for m in messages)


@pytest.mark.parametrize(
    "body",
    [
        """
    class Island(layers.Layer):
        def call(self, x):
            x32 = tf.cast(x, tf.float32)
            return tf.cast(tf.nn.softmax(x32 * tf.constant(2.0, dtype=tf.float32)), x.dtype)
    i = Island()
    """,
        """
    class Ok(layers.Layer):
        def call(self, x):
            return (x * tf.random.normal(tf.shape(x), dtype=x.dtype) + tf.zeros_like(x)
                    + tf.ones(tf.shape(x), dtype=self.compute_dtype))
    o = Ok()
    """,
        """
    class Ok(layers.Layer):
        def __init__(self):
            super().__init__()
            self.head = layers.Dense(1, dtype="float32")
        def call(self, x):
            return self.head(x) + tf.constant(1.0, dtype=tf.float32)
    o = Ok()
    """,
    ],
)
def test_mp406_negatives(body):
    assert check(body, codes=("MP406",))[1] == []


def test_mp406_applies_to_bfloat16_too():
    _, found = check(
        """
    class N(layers.Layer):
        def call(self, x):
            return x + tf.random.uniform(tf.shape(x))
    n = N()
    """,
        policy="mixed_bfloat16",
        codes=("MP406",),
    )
    assert len(found) == 1 and "expected bfloat16" in found[0].message


# ------------------------------------------------------------------ MP407


def test_mp407_ops_and_exponents():
    _, found = check(
        """
    class P(layers.Layer):
        def __init__(self, dim):
            super().__init__()
            self.dim = dim
        def call(self, x):
            a = tf.exp(x) + x ** 2 + x ** 0.5 + x ** -0.5 + self.dim ** -0.5 + 2.0 ** x
            b = tf.reduce_sum(x, axis=1) + tf.reduce_sum(tf.square(x), axis=1) + tf.reduce_mean(x)
            c = tf.math.log(x) + tf.math.log(x + 1e-6) + tf.math.log(x + 1e-12) + tf.nn.softplus(x)
            return a + b + c + tf.exp(tf.cast(x, tf.float32))
    p = P(4)
    """,
        codes=("MP407",),
    )
    lines = sorted((d.location.line, d.location.column) for d in found)
    text = [d.message.split("`")[1] for d in sorted(found, key=lambda d: (d.location.line, d.location.column))]
    assert text == [
        "tf.exp",
        "x ** 2",
        "2.0 ** x",
        "tf.reduce_sum",
        "tf.square",
        "tf.reduce_mean",
        "tf.math.log",
        "tf.math.log",
    ], lines
    assert all(d.fix is None and d.severity == Severity.WARNING for d in found)


def test_mp407_quiet_under_bfloat16():
    body = """
    class P(layers.Layer):
        def call(self, x):
            return tf.exp(x) + tf.square(x)
    p = P()
    """
    assert len(check(body, codes=("MP407",))[1]) == 2
    assert check(body, policy="mixed_bfloat16", codes=("MP407",))[1] == []


def test_keras3_mean_is_not_flagged_but_sum_of_squares_is():
    _, found = check(
        """
    class P(layers.Layer):
        def call(self, x):
            return ops.mean(ops.square(x)) + ops.sum(x * x, axis=-1)
    p = P()
    """,
        header=K3,
        codes=("MP407",),
    )
    assert sorted(d.message.split("`")[1] for d in found) == ["keras.ops.square", "keras.ops.sum"]


# ------------------------------------------------------------------ general


def test_each_finding_once_when_a_function_serves_several_layers():
    _, found = check("""
    def gate(t):
        return tf.exp(t) * -1e9
    a = layers.Lambda(gate)(keras.Input((3,)))
    b = layers.Lambda(gate)(a)
    """)
    assert sorted(d.code for d in found) == ["MP403", "MP407"]


def test_static_pass_does_not_import_tensorflow():
    code = textwrap.dedent("""
        import sys
        from mpdoctor.config import Config
        from mpdoctor.engine import check_source
        src = open(sys.argv[1]).read()
        check_source(src, "m.py", Config())
        assert "tensorflow" not in sys.modules and "keras" not in sys.modules
    """)
    from pathlib import Path

    fixture = Path(__file__).parent / "fixtures" / "MP403" / "masked_attention_keras2.py"
    subprocess.run([sys.executable, "-c", code, str(fixture)], check=True)


@pytest.mark.parametrize(
    "value,problem",
    [
        (65504.0, None),  # the largest float16
        (65519.99, None),  # rounds down to 65504
        (65520.0, "overflow"),  # rounds to inf: the boundary float16_problem tests before asking struct
        (-1e9, "overflow"),
        (1e-8, "underflow"),
        (2.98023223876953125e-08, "underflow"),  # half the smallest subnormal: rounds to 0 (ties to even)
        (3e-08, None),  # just above: rounds up to the smallest subnormal
        (float("inf"), None),  # inf and NaN are no literals float16 breaks
        (float("nan"), None),
        (0.0, None),
    ],
)
def test_float16_problem_is_ieee_rounding(value, problem):
    """MP403's judgement of a literal: what float16 (IEEE binary16, round to nearest even) makes of it."""
    import struct

    from mpdoctor.static.literals import float16_problem

    assert float16_problem(value) == problem
    try:
        rounded = struct.unpack("e", struct.pack("e", value))[0]
        assert (value != 0 and rounded == 0) == (problem == "underflow")
    except OverflowError:
        assert problem == "overflow"
