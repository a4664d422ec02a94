"""Real architectures from keras.applications (weights=None) under mixed_float16, in Keras 3 and tf_keras: the
default softmax `predictions` head is MP401; include_top=False with a float32 softmax head is clean."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("tensorflow")

from trace_support import trace_check

from mpdoctor.diagnostics import Severity

ARCHITECTURES = ["ResNet50", "MobileNetV2", "EfficientNetB0", "DenseNet121"]


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_default_head_is_mp401_and_a_float32_head_is_clean(tmp_path, arch, legacy):
    script = tmp_path / f"{arch.lower()}.py"
    script.write_text(
        textwrap.dedent(f"""\
        import tensorflow as tf

        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        default_head = tf.keras.applications.{arch}(weights=None, input_shape=(64, 64, 3), classes=10)

        backbone = tf.keras.applications.{arch}(weights=None, include_top=False, input_shape=(64, 64, 3),
                                                pooling="avg")
        logits = tf.keras.layers.Dense(16)(backbone.output)
        probabilities = tf.keras.layers.Activation("softmax", dtype="float32")(logits)
        float32_head = tf.keras.Model(backbone.input, probabilities)
        """)
    )
    diagnostics = trace_check(script, legacy=legacy)
    mp401 = [d for d in diagnostics if d.code == "MP401"]
    assert [(d.location.line, d.passes) for d in mp401] == [(4, ("static", "trace"))], [
        (d.code, d.location.line, d.message) for d in diagnostics
    ]
    # numerics false-positive trap: real architectures run in mixed precision (float16 vs float32 stays close)
    assert not [d for d in diagnostics if d.code in ("MP404", "MP405")], [d.message for d in diagnostics]
    serious = [d for d in diagnostics if d.severity is not Severity.INFO and d.location.line > 4]
    assert serious == [], [(d.code, d.location.line, d.message) for d in serious]
