"""Real model families as small model files, built from configs with no download (weights=None, keras-hub backbones
from tiny configs, never presets): shared by the tests that trace real architectures. Each function returns the
source of one file that builds several models under mixed_float16, so one trace child serves a whole family.

Every model is one module attribute; `# default-head` marks the statements whose model keeps a float16 softmax
(MP401 expected of it), `# float32-head` the ones whose head computes in float32 (nothing at warning or above)."""

from __future__ import annotations

import re

# keras.applications accept 32x32 images with weights=None (their smallest size); MobileNetV3Small is built with
# input_shape=None, its open size is found by the trace (issue 14 item 1).
SMALL_IMAGE = "(32, 32, 3)"

HEAD_HELPER = '''
def float32_head(backbone, classes=10):
    """The mixed-precision guide's head: logits in float16, the softmax in float32."""
    pooled = keras.layers.GlobalAveragePooling2D()(backbone.output)
    logits = keras.layers.Dense(classes)(pooled)
    return keras.Model(backbone.input, keras.layers.Activation("softmax", dtype="float32")(logits))
'''


def applications_source(architectures: tuple[str, ...], *, legacy: bool) -> str:
    """Each architecture twice: with its default softmax head, and include_top=False with a float32 head."""
    lines = [
        "import tf_keras as keras" if legacy else "import keras",
        "",
        'keras.mixed_precision.set_global_policy("mixed_float16")',
        HEAD_HELPER,
    ]
    for arch in architectures:
        shape = "None" if arch == "MobileNetV3Small" else SMALL_IMAGE
        variable = arch.lower()
        lines.append(
            f"{variable} = keras.applications.{arch}(weights=None, input_shape={shape}, classes=10)  # default-head"
        )
        lines.append(
            f"{variable}_f32 = float32_head(keras.applications.{arch}(weights=None, include_top=False, "
            f"input_shape={shape}))  # float32-head"
        )
    return "\n".join(lines) + "\n"


# Tiny keras-hub configs. max_sequence_length 64: the trace's open sequence length is at least 32.
KERAS_HUB_SOURCE = """\
import keras
import keras_hub

keras.mixed_precision.set_global_policy("mixed_float16")
hub = keras_hub.models
TEXT = dict(vocabulary_size=64, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32, max_sequence_length=64)
IMAGE = dict(image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32)


def float32_softmax(model):
    return keras.Model(model.input, keras.layers.Activation("softmax", dtype="float32")(model.output))


def float16_softmax(model):
    return keras.Model(model.input, keras.layers.Activation("softmax")(model.output))


bert = hub.BertTextClassifier(hub.BertBackbone(**TEXT), 3, preprocessor=None, activation="softmax")  # default-head
bert_f32 = float32_softmax(hub.BertTextClassifier(hub.BertBackbone(**TEXT), 3, preprocessor=None))  # float32-head
gpt2 = hub.GPT2CausalLM(hub.GPT2Backbone(**TEXT), preprocessor=None)  # float32-head
gpt2_softmax = float16_softmax(hub.GPT2CausalLM(hub.GPT2Backbone(**TEXT), preprocessor=None))  # default-head
vit = hub.ViTImageClassifier(hub.ViTBackbone(**IMAGE), 10, preprocessor=None, activation="softmax")  # default-head
vit_f32 = float32_softmax(hub.ViTImageClassifier(hub.ViTBackbone(**IMAGE), 10, preprocessor=None))  # float32-head
"""


def marked_lines(source: str, mark: str) -> dict[int, str]:
    """{line: variable} of the model statements carrying `# mark`."""
    found = {}
    for number, line in enumerate(source.splitlines(), start=1):
        if line.rstrip().endswith(f"# {mark}"):
            found[number] = re.match(r"(\w+) =", line)[1]
    return found
