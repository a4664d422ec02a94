"""Which dtype TensorFlow and Keras calls produce, as the static dtype flow (mpdoctor.static.dataflow) reads them:
the casts, the value constructors and their defaults, the calls that follow their input, the ops whose result is an
int/bool tensor, and how the flow's dtype classes promote when an op mixes them. Canonical names
(mpdoctor.static.names): `tf.*`, `keras.*`."""

from __future__ import annotations

# ---------------------------------------------------------------- the dtype classes of the flow and their promotion

F16 = "f16"  # derived from the float16 compute dtype (autocast inputs, weights, sublayer outputs)
F32 = "f32"  # provably float32
TENSOR = "tensor"  # a tensor of unknown float dtype (non-autocast argument, helper parameter)
INT = "int"  # int/bool tensors, shapes
CONST = "const"  # Python numbers and other non-tensors
# An op's result takes the highest-ranked class among its operands (float32 meeting float16 is a conflict the flow
# handles on its own: TensorFlow raises).
PROMOTION_RANK = {F32: 4, F16: 3, TENSOR: 2, INT: 1, CONST: 0}
# keras.ops promotes float16 with float32 to float32 under Keras 3 (measured) instead of raising.
PROMOTING_OPS_PREFIX = "keras.ops."

# ---------------------------------------------------------------- dtype spellings

FLOAT32_NAMES = frozenset({"float32", "float64", "float", "double"})  # as wide as float32 or wider
FLOAT16_NAMES = frozenset({"float16", "half"})
INT_NAME_PREFIXES = ("int", "uint", "bool")
FLOATX_GETTERS = frozenset({"keras.backend.floatx", "keras.config.floatx"})  # float32 unless the file sets floatx
FLOATX_SETTERS = ("keras.backend.set_floatx", "keras.config.set_floatx")

# ---------------------------------------------------------------- calls that make a tensor of a known dtype

CAST = frozenset({"tf.cast", "tf.dtypes.cast", "tf.saturate_cast", "keras.ops.cast", "keras.backend.cast"})
# Value constructors: their dtype defaults to the value's (float32 for a Python float).
VALUE = frozenset(
    {
        "tf.constant",
        "tf.convert_to_tensor",
        "tf.Variable",
        "keras.ops.convert_to_tensor",
        "keras.Variable",
        "keras.backend.constant",
        "keras.backend.variable",
        "tf.fill",
        "keras.ops.full",
    }
)
VARIABLES = frozenset({"tf.Variable", "keras.Variable"})  # a raw variable takes its initial value's dtype
DTYPE_SECOND = frozenset({"tf.constant", "tf.convert_to_tensor"})  # `tf.constant(value, dtype)` positionally
VALUE_LAST = frozenset({"tf.fill", "keras.ops.full"})  # `tf.fill(dims, value)`: the value is the last argument
# Creators whose dtype defaults to float32 / floatx when not given.
DEFAULT_FLOAT32 = frozenset(
    {
        "tf.zeros",
        "tf.ones",
        "tf.eye",
        "tf.random.normal",
        "tf.random.uniform",
        "tf.random.truncated_normal",
        "tf.random.stateless_normal",
        "tf.random.stateless_uniform",
        "tf.random.stateless_truncated_normal",
        "keras.random.normal",
        "keras.random.uniform",
        "keras.random.truncated_normal",
        "keras.ops.zeros",
        "keras.ops.ones",
        "keras.ops.eye",
        "keras.backend.zeros",
        "keras.backend.ones",
        "keras.backend.eye",
        "keras.backend.random_normal",
        "keras.backend.random_uniform",
        "keras.backend.truncated_normal",
    }
)
# The dtype of their first argument unless a `dtype=` says otherwise.
FOLLOW_FIRST = frozenset(
    {
        "tf.zeros_like",
        "tf.ones_like",
        "keras.ops.zeros_like",
        "keras.ops.ones_like",
        "keras.backend.zeros_like",
        "keras.backend.ones_like",
        "tf.identity",
        "tf.stop_gradient",
    }
)
SAME_AS_FIRST = frozenset({"tf.nn.moments", "tf.split", "tf.unstack"})  # parts of their first argument
WEIGHT_MAKERS = frozenset({"add_weight", "add_variable"})  # Layer methods creating a variable

# ---------------------------------------------------------------- ops

# The last part of the name of an op whose result is an int/bool tensor (or a shape).
INT_RESULTS = frozenset(
    {
        "shape",
        "size",
        "rank",
        "argmax",
        "argmin",
        "equal",
        "not_equal",
        "greater",
        "greater_equal",
        "less",
        "less_equal",
        "logical_and",
        "logical_or",
        "logical_not",
        "is_nan",
        "is_inf",
        "is_finite",
        "isnan",
        "isinf",
        "isfinite",
        "range",
        "arange",
        "sequence_mask",
        "one_hot",
        "top_k",
        "int_shape",
        "ndim",
        "count_nonzero",
        "where_v1",
    }
)
MATH_PREFIXES = ("tf.", "keras.ops.", "keras.backend.")
NOT_MATH_PREFIXES = (
    "tf.print",
    "tf.debugging.",
    "tf.summary.",
    "tf.TensorShape",
    "tf.function",
    "tf.keras.",
    "tf.io.",
    "tf.data.",
    "tf.config.",
    "tf.saved_model.",
    "tf.train.",
    "tf.compat.",
    "tf.GradientTape",
    "tf.name_scope",
    "tf.device",
    "keras.backend.floatx",
    "keras.backend.epsilon",
)
# The last part of the name of an op whose only tensor is its first argument (the rest: shapes, axes, counts).
FIRST_OPERAND_ONLY = frozenset(
    {
        "reshape",
        "transpose",
        "tile",
        "expand_dims",
        "squeeze",
        "gather",
        "reduce_sum",
        "reduce_mean",
        "reduce_max",
        "reduce_min",
        "sum",
        "mean",
        "max",
        "min",
        "pad",
        "one_hot",
        "split",
        "broadcast_to",
        "softmax",
        "log_softmax",
        "cumsum",
        "argmax",
        "argmin",
    }
)
TENSOR_KEYWORDS = ("x", "y", "a", "b", "values", "logits", "labels", "input", "tensor")  # keyword operands
NOT_TENSOR_ATTRIBUTES = frozenset({"shape", "ndim", "dtype", "name", "rank"})  # `x.shape`: not a tensor
