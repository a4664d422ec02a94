"""Classes of real-world code found on public scripts (issue 14, items 12-15), run for real in both Keras
versions: what the scripts do, and what the trace pass reports about it."""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")

from trace_support import run_python, trace_check

IMPORTS = {
    False: "import keras\nfrom keras import layers, mixed_precision",
    True: "import tf_keras as keras\nfrom tf_keras import layers, mixed_precision",
}

# Dense(softmax) then a float32 linear Activation (the guide's float32 output, misread), and the same model with
# the softmax moved into the float32 Activation. Logits [20, 0, 0]: float16 softmax flushes the small
# probabilities (2e-9) to exactly 0, float32 keeps them.
SOFTMAX_THEN_FLOAT32_CAST = """\
import numpy as np
{imports}

mixed_precision.set_global_policy("mixed_float16")
inputs = keras.Input((4,))
dense = layers.Dense(3, activation="softmax")
model = keras.Model(inputs, layers.Activation("linear", dtype="float32")(dense(inputs)))
fixed_dense = layers.Dense(3)
fixed = keras.Model(inputs, layers.Activation("softmax", dtype="float32")(fixed_dense(inputs)))
kernel = np.zeros((4, 3), dtype="float32")
kernel[:, 0] = 5.0
for layer in (dense, fixed_dense):
    layer.set_weights([kernel, np.zeros(3, dtype="float32")])
x = np.ones((2, 4), dtype="float32")
for y in (model.predict(x, verbose=0), fixed.predict(x, verbose=0)):
    print(y.dtype, "flushed" if (y == 0).any() else "kept")
"""


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_a_float32_linear_activation_does_not_save_a_float16_softmax(tmp_path, legacy):
    path = tmp_path / "model.py"
    path.write_text(SOFTMAX_THEN_FLOAT32_CAST.format(imports=IMPORTS[legacy]))
    ran = run_python(path, legacy=legacy)
    # The float32 output of the first model holds zeros the float16 softmax made; the fixed one does not.
    assert ran.stdout.split() == ["float32", "flushed", "float32", "kept"], ran.stderr[-2000:]
    mp401 = [d for d in trace_check(path, legacy=legacy) if d.code in ("MP401", "MP402")]
    assert [(d.code, d.location.line, d.passes) for d in mp401] == [("MP401", 7, ("static", "trace"))]
    assert "only casts the result" in mp401[0].message


# A SavedModel that takes int32 token ids (like a text encoder after its preprocessor) and returns float32.
IDS_MODULE = """\
import sys
import tensorflow as tf

class Encoder(tf.Module):
    def __init__(self):
        self.table = tf.Variable(tf.ones([10, 3]))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.int32)])
    def __call__(self, ids):
        return tf.reduce_sum(tf.gather(self.table, ids), axis=1)

module = Encoder()
tf.saved_model.save(module, sys.argv[1], signatures={"serving_default": module.__call__})
"""

FED_IDS = {
    True: """\
import os
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
import tensorflow_hub as hub
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")
ids = keras.Input((4,), dtype=tf.int32)
encoded = hub.KerasLayer({handle!r})(ids)
model = keras.Model(ids, keras.layers.Dense(2, dtype="float32")(encoded))
print(model.predict(np.ones((2, 4), dtype="int32"), verbose=0).dtype)
""",
    False: """\
import keras
import numpy as np

keras.mixed_precision.set_global_policy("mixed_float16")
ids = keras.Input((4,), dtype="int32")
encoded = keras.layers.TFSMLayer({handle!r}, call_endpoint="serving_default")(ids)
model = keras.Model(ids, keras.layers.Dense(2, dtype="float32")(encoded["output_0"]))
print(model.predict(np.ones((2, 4), dtype="int32"), verbose=0).dtype)
""",
}


@pytest.fixture(scope="module")
def ids_savedmodel(tmp_path_factory):
    import os
    import subprocess
    import sys

    directory = tmp_path_factory.mktemp("ids_savedmodel")
    (directory / "make.py").write_text(IDS_MODULE)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    target = directory / "encoder"
    subprocess.run([sys.executable, str(directory / "make.py"), str(target)], check=True, env=env, timeout=300)
    return target


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_a_savedmodel_fed_integer_ids_is_not_mp201(tmp_path, ids_savedmodel, legacy):
    path = tmp_path / "encoder_ids.py"
    path.write_text(FED_IDS[legacy].format(handle=str(ids_savedmodel)))
    ran = run_python(path, legacy=legacy)
    assert ran.returncode == 0 and ran.stdout.split()[-1:] == ["float32"], ran.stderr[-2000:]  # it works
    found = trace_check(path, legacy=legacy)
    assert not [d for d in found if d.code in ("MP201", "MP001")], [d.message for d in found]


# A model saved in float32 (by another script), loaded, then the policy switched on: the loaded model keeps float32
# (ground truth printed by the script), which MP101 reports in both passes.
SAVE = {
    False: """\
import keras
keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2, activation="softmax")]).save({path!r})
""",
    True: """\
import tf_keras as keras
keras.Sequential([keras.layers.Dense(3, input_shape=(4,)), keras.layers.Dense(2, activation="softmax")]).save({path!r})
""",
}
LOAD = {
    False: """\
import keras

model = keras.saving.load_model({path!r})
keras.mixed_precision.set_global_policy("mixed_float16")
print(keras.mixed_precision.global_policy().name, model.layers[-1].compute_dtype)
""",
    True: """\
import os
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tf_keras as keras

model = keras.models.load_model({path!r})
keras.mixed_precision.set_global_policy("mixed_float16")
print(keras.mixed_precision.global_policy().name, model.layers[-1].compute_dtype)
""",
}


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_a_model_loaded_before_the_policy_keeps_float32(tmp_path, legacy):
    saved = tmp_path / ("m.h5" if legacy else "m.keras")
    (tmp_path / "save.py").write_text(SAVE[legacy].format(path=str(saved)))
    assert run_python(tmp_path / "save.py", legacy=legacy).returncode == 0
    path = tmp_path / "reload.py"
    path.write_text(LOAD[legacy].format(path=str(saved)))
    ran = run_python(path, legacy=legacy)
    assert ran.stdout.split()[-2:] == ["mixed_float16", "float32"], ran.stderr[-2000:]
    [mp101] = [d for d in trace_check(path, legacy=legacy) if d.code == "MP101"]
    assert (mp101.location.line, mp101.passes) == (6 if legacy else 4, ("static", "trace"))
    assert "keeps the dtypes it was saved with" in mp101.message


PRESET = """\
import keras
import keras_hub

backbone = keras_hub.models.BertBackbone.from_preset({preset!r})
keras.mixed_precision.set_global_policy("mixed_float16")
print(keras.mixed_precision.global_policy().name, backbone.layers[-1].compute_dtype)
"""


def test_a_keras_hub_preset_made_before_the_policy_keeps_float32(tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    preset = tmp_path / "tiny_bert"
    keras_hub.models.BertBackbone(
        vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16, max_sequence_length=8
    ).save_to_preset(str(preset))
    path = tmp_path / "preset.py"
    path.write_text(PRESET.format(preset=str(preset)))
    ran = run_python(path, legacy=False)
    assert ran.stdout.split()[-2:] == ["mixed_float16", "float32"], ran.stderr[-2000:]
    [mp101] = [d for d in trace_check(path, legacy=False) if d.code == "MP101"]
    assert (mp101.location.line, mp101.passes) == (5, ("static", "trace"))


# A module constant NEG_INF = -1e9 used by a plain helper function that a float16 layer calls: -inf in float16,
# so a fully masked row is NaN (printed by the script); both passes report the constant.
NEG_INF_HELPER = """\
import numpy as np
import tensorflow as tf
{imports}

mixed_precision.set_global_policy("mixed_float16")
NEG_INF = -1e9


def mask_logits(logits, mask):
    return tf.where(mask, logits, NEG_INF)


class MaskedSoftmax(layers.Layer):
    def call(self, scores, mask):
        return tf.nn.softmax(mask_logits(scores, mask), axis=-1)


scores = keras.Input((8,))
mask = keras.Input((8,), dtype="bool")
probs = layers.Activation("linear", dtype="float32")(MaskedSoftmax()(scores, mask))
model = keras.Model([scores, mask], probs)
y = model.predict([np.zeros((1, 8), "float32"), np.zeros((1, 8), bool)], verbose=0)
print("nan" if np.isnan(y).any() else "finite")
"""


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_a_module_constant_in_a_plain_helper_is_mp403(tmp_path, legacy):
    path = tmp_path / "masked.py"
    path.write_text(NEG_INF_HELPER.format(imports=IMPORTS[legacy]))
    ran = run_python(path, legacy=legacy)
    assert ran.stdout.split()[-1:] == ["nan"], ran.stderr[-2000:]
    [mp403] = [d for d in trace_check(path, legacy=legacy) if d.code == "MP403"]
    assert mp403.location.line == 7 and "mask_logits" in mp403.message
    assert mp403.passes == ("static", "trace"), mp403
