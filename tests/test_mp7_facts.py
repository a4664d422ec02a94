"""Keras 3 quantization facts without TensorFlow: policy names and the weights-file layouts measured on Keras 3.15.1
(tests/test_mp7_quantization.py makes the real files)."""

from mpdoctor.facts.quantization import mode_of_extra_count, mode_of_variables, quantized_layers, quantized_policy


def test_quantized_policy_names():
    assert quantized_policy("int8_from_float32").mode == "int8"
    assert quantized_policy("int4/128_from_mixed_bfloat16").source == "mixed_bfloat16"
    assert quantized_policy("float8_from_mixed_float16").mode == "float8"
    assert quantized_policy("mixed_float16") is None
    assert quantized_policy("int8") is None
    assert quantized_policy(None) is None


# (key, dtype, shape) rows of `.weights.h5` files written by Keras 3.15.1 (`h5py` visititems of the saved files).
INT8_DENSE = [
    ("layers/dense/vars/0", "int8", [4, 8]),
    ("layers/dense/vars/1", "float32", [8]),
    ("layers/dense/vars/2", "float32", [8]),
]
INT4_EMBEDDING = [
    ("layers/embedding/vars/0", "int8", [10, 4]),
    ("layers/embedding/vars/1", "float32", [10, 1]),
    ("layers/embedding/vars/2", "int8", [10, 1]),
    ("layers/embedding/vars/3", "float32", [8]),
]
FLOAT8_DENSE = [("layers/dense_1/vars/0", "float32", [6, 3])] + [
    (f"layers/dense_1/vars/{i}", "float32", [] if i % 2 else [1024]) for i in range(1, 7)
]
FLOAT_LAYERS = [("layers/batch_normalization/vars/" + str(i), "float32", [8]) for i in range(4)] + [
    ("layers/dense_2/vars/0", "float32", [4, 8]),
    ("layers/dense_2/vars/1", "float32", [8]),
]


def test_quantized_layers_of_a_weights_file():
    found = quantized_layers(INT8_DENSE + INT4_EMBEDDING + FLOAT8_DENSE + FLOAT_LAYERS)
    assert [(q.layer, q.mode, q.variables) for q in found] == [
        ("layers/dense", "int8", 3),
        ("layers/embedding", "int4", 4),
        ("layers/dense_1", "float8", 7),
    ]
    assert quantized_layers(FLOAT_LAYERS) == []


def test_modes_from_load_messages():
    assert mode_of_variables(["bias", "kernel", "kernel_scale"]) == "int8"
    assert mode_of_variables(["embeddings", "embeddings_scale", "embeddings_zero", "g_idx"]) == "int4"
    assert mode_of_variables(["kernel", "bias", "inputs_scale", "inputs_amax_history"]) == "float8"
    assert mode_of_variables(["kernel", "bias"]) is None
    assert [mode_of_extra_count(n) for n in (1, 3, 6, 2)] == ["int8", "int4", "float8", None]
