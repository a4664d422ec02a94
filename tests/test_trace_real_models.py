"""Issue 14, Done when: real model families traced under mixed_float16, built from configs with no download
(tests/real_models.py): keras.applications in Keras 3 (6, MobileNetV3Small with input_shape=None) and tf_keras,
keras-hub BERT classifier, GPT-2 causal LM and ViT classifier from tiny configs (Keras 3 only). Each model with its
default head (a float16 softmax: MP401) and with a float32 head (nothing at warning or above); the float16 vs
float32 numerics must have run for every model, and real architectures raise no MP404/MP405.

One trace child per family (module-scoped fixtures): the models of a family are one file."""

from __future__ import annotations

import re
from unittest import mock

import pytest

pytest.importorskip("tensorflow")

from real_models import KERAS_HUB_SOURCE, applications_source, marked_lines
from trace_support import trace_check

from mpdoctor.diagnostics import Severity
from mpdoctor.trace import checks

# The unmarked families are the cheapest that prove the item (MobileNetV3Small's open input in both Keras lines);
# the `slow` ones complete the six Keras 3 architectures and cover those tf_keras had in test_trace_applications.
KERAS3_APPLICATIONS = ("MobileNetV3Small", "MobileNetV2")
KERAS3_APPLICATIONS_MORE = ("ResNet50", "EfficientNetB0", "DenseNet121", "VGG16")
TF_KERAS_APPLICATIONS = ("MobileNetV3Small", "MobileNetV2")
TF_KERAS_APPLICATIONS_MORE = ("ResNet50", "EfficientNetB0", "DenseNet121")


def _trace_family(tmp_path_factory, name: str, source: str, *, legacy: bool):
    path = tmp_path_factory.mktemp(name) / f"{name}.py"
    path.write_text(source)
    outcomes = []
    original = checks.run_trace

    def capture(*args, **kwargs):  # the facts of the same run as the diagnostics
        outcomes.append(original(*args, **kwargs))
        return outcomes[-1]

    with mock.patch.object(checks, "run_trace", capture):
        diagnostics = trace_check(path, legacy=legacy)
    [outcome] = outcomes
    return source, diagnostics, outcome.facts


@pytest.fixture(scope="module")
def keras3_applications(tmp_path_factory):
    return _trace_family(
        tmp_path_factory, "applications_keras3", applications_source(KERAS3_APPLICATIONS, legacy=False), legacy=False
    )


@pytest.fixture(scope="module")
def keras3_applications_more(tmp_path_factory):
    source = applications_source(KERAS3_APPLICATIONS_MORE, legacy=False)
    return _trace_family(tmp_path_factory, "applications_more_keras3", source, legacy=False)


@pytest.fixture(scope="module")
def tf_keras_applications(tmp_path_factory):
    pytest.importorskip("tf_keras")
    source = applications_source(TF_KERAS_APPLICATIONS, legacy=True)
    return _trace_family(tmp_path_factory, "applications_tf_keras", source, legacy=True)


@pytest.fixture(scope="module")
def tf_keras_applications_more(tmp_path_factory):
    pytest.importorskip("tf_keras")
    source = applications_source(TF_KERAS_APPLICATIONS_MORE, legacy=True)
    return _trace_family(tmp_path_factory, "applications_more_tf_keras", source, legacy=True)


@pytest.fixture(scope="module")
def keras_hub_models(tmp_path_factory):
    pytest.importorskip("keras_hub")  # not in the TF 2.13 matrix; Keras 3 only
    return _trace_family(tmp_path_factory, "keras_hub_models", KERAS_HUB_SOURCE, legacy=False)


def assert_family(family, *, static_knows_the_heads: bool) -> None:
    """`static_knows_the_heads`: the static pass knows these constructors' softmax heads (keras.applications), so
    each default head is one MP401 found by both passes at its line."""
    source, diagnostics, facts = family
    default_heads = marked_lines(source, "default-head")
    float32_heads = marked_lines(source, "float32-head")
    serious = [d for d in diagnostics if d.severity is not Severity.INFO]
    report = [(d.code, d.location.line, d.message) for d in diagnostics]
    # the default heads are MP401, found by the trace (whatever the static pass knows of the constructors) ...
    assert {d.code for d in serious} <= {"MP401"}, report
    named = {re.search(r"of model `(\w+)`", d.message)[1] for d in serious if "trace" in d.passes}
    assert named == set(default_heads.values()), report
    static_only = {d.location.line for d in serious if "trace" not in d.passes}
    assert static_only <= set(default_heads), report
    if static_knows_the_heads:
        both = {d.location.line for d in serious if d.passes == ("static", "trace")}
        assert both == set(default_heads), report
    # ... the float32 heads have nothing at warning or above, and real architectures give no numerics findings
    assert not [d for d in diagnostics if d.code in ("MP404", "MP405", "MP001")], report
    models = {model.name: model for model in facts.models}
    assert set(models) == set(default_heads.values()) | set(float32_heads.values()), sorted(models)
    for name, model in models.items():
        assert model.numerics is not None and model.numerics.skipped is None, (name, model.numerics)
        assert model.numerics.layers, name


def test_keras3_applications(keras3_applications):
    assert_family(keras3_applications, static_knows_the_heads=True)


@pytest.mark.parametrize("family", ["keras3_applications", "tf_keras_applications"])
def test_mobilenet_v3_small_open_input_gets_a_size_without_empty_outputs(request, family):
    """input_shape=None leaves the image size open: the sample gets the smallest size with no empty layer output
    (2x2 images gave NaN from pooling over nothing, item 1), so the float32 reference is finite everywhere."""
    _, _, facts = request.getfixturevalue(family)
    [model] = [m for m in facts.models if m.name == "mobilenetv3small"]
    assert model.numerics.open_size >= 32, model.numerics.open_size
    assert all(row.finite_reference for row in model.numerics.layers)


@pytest.mark.slow
def test_keras3_more_applications(keras3_applications_more):
    assert_family(keras3_applications_more, static_knows_the_heads=True)


def test_tf_keras_applications(tf_keras_applications):
    assert_family(tf_keras_applications, static_knows_the_heads=True)


@pytest.mark.slow
def test_tf_keras_more_applications(tf_keras_applications_more):
    assert_family(tf_keras_applications_more, static_knows_the_heads=True)


def test_keras_hub_bert_gpt2_vit(keras_hub_models):
    assert_family(keras_hub_models, static_knows_the_heads=False)


def test_keras_hub_gpt2_returns_float32_logits(keras_hub_models):
    """The causal LM declares float16 logits but returns float32 (item 3): its output is judged as returned."""
    _, diagnostics, facts = keras_hub_models
    [gpt2] = [m for m in facts.models if m.name == "gpt2"]
    [output] = gpt2.graph.outputs
    assert output.observed_dtype == "float32", output
    assert not [d for d in diagnostics if d.code == "MP402"], [d.message for d in diagnostics]
