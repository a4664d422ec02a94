"""`mpdoctor plan` on real models with their default heads (issue 16): keras.applications ResNet50 (weights=None,
32x32 input, the smallest it accepts) in Keras 3 and tf_keras, and a keras-hub BERT classifier from a tiny config (no
preset, nothing downloaded; Keras 3 only). Under mixed_float16 and mixed_bfloat16 the plan keeps exactly the softmax
head and says so. One plan run per model, policy and Keras version, shared by the module's tests."""

from __future__ import annotations

import json
import textwrap

import pytest

pytest.importorskip("tensorflow")

import mpdoctor.plan
from mpdoctor.cli import main
from mpdoctor.report.plan import render_text

RESNET = """\
    import KERAS

    keras.mixed_precision.set_global_policy("POLICY")
    model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3))
    """

BERT = """\
    import keras
    import keras_hub

    keras.mixed_precision.set_global_policy("POLICY")
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=100, num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64, max_sequence_length=16
    )
    classifier = keras_hub.models.BertTextClassifier(backbone, num_classes=2, preprocessor=None, activation="softmax")
    """


def _plan_once(tmp_path_factory, body: str, policy: str, legacy: bool, sample: bool = False) -> tuple[dict, str]:
    """(the JSON document, the text report) of one `mpdoctor plan` run: the JSON is what the CLI wrote, the text is
    rendered from the same run's result."""
    folder = tmp_path_factory.mktemp("plan")
    path = folder / "model.py"
    path.write_text(
        textwrap.dedent(body).replace("POLICY", policy).replace("KERAS", "tf_keras as keras" if legacy else "keras")
    )
    args = ["plan", "--format", "json", "-o", str(folder / "plan.json")]
    if sample:
        import numpy as np

        rng = np.random.default_rng(0)
        np.savez(
            folder / "sample.npz",
            token_ids=rng.integers(1, 100, (2, 16)).astype("int32"),
            segment_ids=np.zeros((2, 16), "int32"),
            padding_mask=np.ones((2, 16), "int32"),
        )
        args += ["--sample", str(folder / "sample.npz")]
    results = []
    original = mpdoctor.plan.make_plan

    def keeping(*a, **k):
        results.append(original(*a, **k))
        return results[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TF_USE_LEGACY_KERAS", "1" if legacy else "0")
        patch.setattr(mpdoctor.plan, "make_plan", keeping)
        code = main([*args, str(path)])
    assert code == 1, code  # a layer to keep in float32
    import io

    text = io.StringIO()
    render_text(results[0], text)
    return json.loads((folder / "plan.json").read_text()), text.getvalue()


CASES = {
    "resnet50-keras3-float16": (RESNET, "mixed_float16", False),
    "resnet50-keras3-bfloat16": (RESNET, "mixed_bfloat16", False),
    "resnet50-tf_keras-float16": (RESNET, "mixed_float16", True),
    "resnet50-tf_keras-bfloat16": (RESNET, "mixed_bfloat16", True),
}
SLOW = {"resnet50-keras3-bfloat16", "resnet50-tf_keras-float16", "resnet50-tf_keras-bfloat16"}


@pytest.fixture(scope="module", params=[pytest.param(c, marks=[pytest.mark.slow] if c in SLOW else []) for c in CASES])
def resnet_plan(request, tmp_path_factory):
    body, policy, legacy = CASES[request.param]
    return (policy, *_plan_once(tmp_path_factory, body, policy, legacy))


def _assert_keeps_exactly_the_softmax_head(policy: str, document: dict, text: str, head: str) -> None:
    [model] = document["models"]
    plan = model["plan"]
    assert plan["policy"] == policy
    assert [(layer["name"], layer["reason"]) for layer in plan["layers"]] == [(head, "output-activation")], plan
    assert "softmax" in plan["layers"][0]["detail"]
    assert plan["final"]["passed"] and plan["final"]["finite"], plan["final"]
    assert plan["gradient_advice"] is None  # BERT is compiled (keras-hub's default): its training step is fine too
    assert model["low_precision_share"] > 0.95  # the head is a sliver of the multiply-adds (2.5 % at 32x32)
    # ... and the text says so: one layer kept, that it is the softmax output, and that the plan passes
    assert f"under {policy} (rtol 0.01): keep 1 of {plan['candidates']} layers in float32:" in text, text
    assert f"{head} (Dense" in text and "softmax model output (MP401)" in text, text
    assert "with the plan: outputs finite" in text and "within rtol" in text, text


def test_resnet50_keeps_exactly_its_softmax_head(resnet_plan):
    policy, document, text = resnet_plan
    _assert_keeps_exactly_the_softmax_head(policy, document, text, "predictions")


@pytest.fixture(scope="module", params=["mixed_float16", pytest.param("mixed_bfloat16", marks=pytest.mark.slow)])
def bert_plan(request, tmp_path_factory):
    pytest.importorskip("keras_hub")
    return (request.param, *_plan_once(tmp_path_factory, BERT, request.param, False, sample=True))


def test_keras_hub_bert_classifier_keeps_exactly_its_softmax_head(bert_plan):
    policy, document, text = bert_plan
    _assert_keeps_exactly_the_softmax_head(policy, document, text, "logits")
