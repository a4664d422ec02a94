# Abridged excerpt (see SOURCE.md): tensorflow/models official/utils/flags/_performance.py.
import tensorflow as tf
from absl import flags

# Map string to TensorFlow dtype
DTYPE_MAP = {
    "fp16": tf.float16,
    "bf16": tf.bfloat16,
    "fp32": tf.float32,
}


def get_tf_dtype(flags_obj):
    if getattr(flags_obj, "fp16_implementation", None) == "graph_rewrite":
        return tf.float32
    return DTYPE_MAP[flags_obj.dtype]


def define_performance(dtype=True):
    if dtype:
        flags.DEFINE_enum(
            name="dtype", short_name="dt", default="fp32", enum_values=DTYPE_MAP.keys(), help="The TensorFlow datatype"
        )
