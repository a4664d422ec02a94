"""The one encoding of the Keras behaviour mpdoctor relies on, shared by the static pass, the trace child and the
Jupyter live path: which Keras a file or an environment means, how model classes are spelled, which call arguments
a layer autocasts, and how to walk a model's layers. Each fact was measured on TF 2.21 / Keras 3.15 / tf_keras 2.21.

Pure Python: never imports TensorFlow or Keras (runtime helpers take the live objects they inspect).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Mapping
from typing import Any

from mpdoctor.facts.tf_releases import FIRST_KERAS3  # the TensorFlow whose tf.keras is Keras 3

# ------------------------------------------------------------------------------------------- which Keras

LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
# TensorFlow routes tf.keras to tf_keras exactly for these values (tensorflow/python/util/lazy_loader.py).
_LEGACY_KERAS_VALUES = ("true", "True", "1")


def legacy_keras_requested(value: object) -> bool:
    """Whether a TF_USE_LEGACY_KERAS value makes `tf.keras` tf_keras (Keras 2) on TF >= 2.16."""
    return isinstance(value, (str, int)) and str(value) in _LEGACY_KERAS_VALUES


def legacy_keras_env(environ: Mapping[str, str] | None = None) -> bool:
    return legacy_keras_requested((os.environ if environ is None else environ).get(LEGACY_KERAS_ENV))


def environ_settings(node: ast.AST) -> list[tuple[ast.AST, ast.AST, str]]:
    """(key, value, how) of each environment variable one statement or call sets: "set"
    (`os.environ[KEY] = value`, `os.environ.update({KEY: value})`) or "default" (`os.environ.setdefault(KEY,
    value)`, which keeps a value the environment already has). `os.putenv` does not count: TensorFlow and Keras
    read `os.environ`, which putenv leaves unchanged."""
    pairs: list[tuple[ast.AST, ast.AST, str]] = []
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript):
        pairs.append((node.targets[0].slice, node.value, "set"))
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "setdefault" and len(node.args) == 2:
            pairs.append((node.args[0], node.args[1], "default"))
        elif node.func.attr == "update" and len(node.args) == 1 and isinstance(node.args[0], ast.Dict):
            pairs += [
                (k, v, "set") for k, v in zip(node.args[0].keys, node.args[0].values, strict=True) if k is not None
            ]
    return pairs


def legacy_keras_setting(node: ast.AST) -> str | None:
    """How one statement or call of a file sets TF_USE_LEGACY_KERAS to a value TF honours: "set" or "default"
    (see `environ_settings`); None otherwise."""
    for key, value, how in environ_settings(node):
        if (
            isinstance(key, ast.Constant)
            and key.value == LEGACY_KERAS_ENV
            and isinstance(value, ast.Constant)
            and legacy_keras_requested(value.value)
        ):
            return how
    return None


def file_legacy_keras_setting(tree: ast.AST) -> str | None:
    """The strongest way the file sets TF_USE_LEGACY_KERAS anywhere: "set", "default" or None."""
    found = {legacy_keras_setting(node) for node in ast.walk(tree)}
    return "set" if "set" in found else "default" if "default" in found else None


def file_turns_on_legacy_keras(setting: str | None, environ: Mapping[str, str]) -> bool:
    """Whether a file's `file_legacy_keras_setting` sets TF_USE_LEGACY_KERAS=1 in `environ`: an assignment does,
    `setdefault` only where the variable is not set already."""
    return setting == "set" or (setting == "default" and LEGACY_KERAS_ENV not in environ)


def imported_roots(tree: ast.AST) -> set[str]:
    """Top-level packages a file imports (`tf_keras`, `keras`, `tensorflow_hub`, ...)."""
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


# ------------------------------------------------------------------------------------ how classes are spelled
# Canonical names, as mpdoctor.static.names resolves every import spelling (`tf.keras.X`, `tf_keras.X`, `keras.X`).

SEQUENTIAL = (
    "keras.Sequential",
    "keras.models.Sequential",
    "keras.models.sequential.Sequential",
    "keras.engine.sequential.Sequential",
)
FUNCTIONAL = (
    "keras.Model",
    "keras.models.Model",
    "keras.models.model.Model",
    "keras.engine.training.Model",
    "keras.models.functional.Functional",
    "keras.engine.functional.Functional",
)
INPUT_TENSORS = ("keras.Input", "keras.layers.Input")  # calls that return a symbolic tensor
INPUT_LAYERS = (*INPUT_TENSORS, "keras.layers.InputLayer")
BASE_LAYERS = ("keras.layers.Layer", "keras.Layer", "keras.engine.base_layer.Layer")
BASE_MODELS = (
    "keras.Model",
    "keras.models.Model",
    "keras.Sequential",
    "keras.models.Sequential",
    "keras.engine.training.Model",
)
SAVEDMODEL_LAYERS = ("hub.KerasLayer", "keras.layers.TFSMLayer")
# Their class names, as a built layer reports them, and the API each is spelled as in findings.
SAVEDMODEL_LAYER_APIS = {api.rsplit(".", 1)[-1]: api for api in SAVEDMODEL_LAYERS}
# The classes a built Keras model (both lines) is an instance of, by name.
MODEL_CLASS_NAMES = ("Model", "Functional", "Sequential")

# Calls that make a whole model without a Keras constructor in the user's code. `built`: its layers are created by
# this call under the global policy then in force (transformers TF models from `from_pretrained` or from a config,
# keras-hub / keras-nlp / keras-cv presets); `loaded`: restored with the dtypes it was saved with (a Keras model
# file, a SavedModel), so no later global policy reaches it either.
_LOADERS = ("keras.models.load_model", "keras.saving.load_model", "tf.saved_model.load")
_PRESET_PACKAGES = ("keras_hub.", "keras_nlp.", "keras_cv.")


def model_factory(name: str | None) -> str | None:
    """'built', 'loaded' or None for the canonical name of a call (`transformers.TFAutoModel.from_pretrained`)."""
    if not name:
        return None
    if name in _LOADERS:
        return "loaded"
    module, _, last = name.rpartition(".")
    receiver = module.rpartition(".")[2]
    if name.startswith("transformers."):
        if last == "from_pretrained" and receiver.startswith("TF"):
            return "built"
        if last.startswith("TF") and (last.endswith("Model") or "For" in last):  # `TFBertModel(config)`
            return "built"
    if name.startswith(_PRESET_PACKAGES) and last == "from_preset" and receiver[:1].isupper():
        return "built"
    return None


# keras-hub / keras-nlp / keras-cv preset classes that make no model: what a model's input goes through
_PRESET_NON_MODELS = ("Preprocessor", "Tokenizer", "ImageConverter", "AudioConverter", "Converter")


def builds_model(name: str | None) -> bool:
    """A call that makes a whole model under the global policy then in force (`model_factory` 'built'), a preset
    preprocessor or tokenizer excluded (`GemmaCausalLMPreprocessor.from_preset` builds no layer of the model)."""
    if model_factory(name) != "built":
        return False
    receiver = (name or "").rpartition(".")[0].rpartition(".")[2]
    return not receiver.endswith(_PRESET_NON_MODELS)


LAMBDA = "keras.layers.Lambda"


# ------------------------------------------------------------------------------------------------- autocast
# A layer computing in a floating dtype casts its floating inputs to its compute dtype before `call`: Keras 3 casts
# every argument, positional and keyword; tf_keras only the first argument (with any nesting inside it:
# `Add()([a, b])` casts both). Integer and boolean inputs are never cast. Input layers and plain ops do not cast.

# Preprocessing layers whose output is integer ids or strings: never autocast downstream.
NON_FLOAT_OUTPUT_LAYERS = frozenset({"StringLookup", "IntegerLookup", "TextVectorization", "Hashing", "HashedCrossing"})
# Layers that never autocast or take no floating input: a float32 tensor reaches them unchanged.
NO_AUTOCAST_LAYERS = frozenset({"Embedding", "InputLayer", "Input", "CategoryEncoding", *NON_FLOAT_OUTPUT_LAYERS})
# ... and in Keras 3 also these, built with autocast off.
NO_AUTOCAST_LAYERS_KERAS3 = frozenset(
    {"LayerNormalization", "GroupNormalization", "RandomFlip", "RandomCrop", "Pipeline"}
)


def autocasts_argument(keras_major: int, index: int) -> bool:
    """Whether a layer's autocast reaches the call argument at position `index` (0 = the first, or a keyword naming
    the first parameter of `call`; -1 = any other keyword)."""
    return keras_major >= 3 or index == 0


def layer_class_autocasts(class_name: str, keras_major: int) -> bool:
    """Whether a built-in layer class autocasts its input (the static pass knows classes, not flags)."""
    if class_name in NO_AUTOCAST_LAYERS:
        return False
    return not (keras_major >= 3 and class_name in NO_AUTOCAST_LAYERS_KERAS3)


def autocast_flag(layer: object) -> bool:
    """A live layer's autocast switch: Keras 3 `layer.autocast`, tf_keras `layer._autocast`."""
    value = getattr(layer, "autocast", None)
    if value is None:
        value = getattr(layer, "_autocast", None)
    return True if value is None else bool(value)


# -------------------------------------------------------------------------------------------- live objects

KERAS3 = "keras3"
TF_KERAS = "tf_keras"
KERAS2 = "keras2"  # Keras 2.13-2.15: the `keras` package behind TF 2.13-2.15's tf.keras (tf_keras' codebase)


def flavour_of(obj: object) -> str | None:
    """ "keras3", "tf_keras" or "keras2" from an object's class hierarchy (the first Keras class found), else None.
    A `keras.*` class is Keras 2 when its hierarchy holds Keras 2's base layer (`keras.src.engine.base_layer`, the
    module tf_keras also has): the package name alone does not say which Keras it is."""
    mro = type(obj).__mro__
    for cls in mro:
        module = cls.__module__ or ""
        if module == "keras" or module.startswith("keras."):
            return KERAS2 if any(_is_keras2_base(c.__module__ or "") for c in mro) else KERAS3
        if module == "tf_keras" or module.startswith("tf_keras."):
            return TF_KERAS
    return None


def is_keras2_line(flavour: str | None) -> bool:
    """Whether objects of a flavour follow Keras 2's structure (tf_keras and Keras 2.13-2.15 share one codebase)."""
    return flavour in (TF_KERAS, KERAS2)


def _is_keras2_base(module: str) -> bool:
    return module.endswith(".engine.base_layer") and module.split(".")[0] == "keras"


# Which package `tf.keras` is, as TensorFlow's lazy loader decides on first use (tensorflow/python/util/
# lazy_loader.py): from TF 2.15, TF_USE_LEGACY_KERAS routes it to tf_keras (when installed); otherwise, and always
# on TF 2.13-2.14, it is the `keras` package, whose own version says which Keras it is (2.x up to TF 2.15, 3.x from
# TF 2.16, which requires Keras 3).
FIRST_TF_HONOURING_LEGACY_KERAS = (2, 15)


def tf_keras_package(tensorflow_version: tuple[int, int] | None, legacy: bool, tf_keras_installed: bool = True) -> str:
    """The package `tf.keras` resolves to: "keras" or "tf_keras"."""
    honoured = tensorflow_version is None or tensorflow_version >= FIRST_TF_HONOURING_LEGACY_KERAS
    return "tf_keras" if legacy and honoured and tf_keras_installed else "keras"


def tf_keras_major(
    tensorflow_version: tuple[int, int] | None, legacy: bool, keras_version: str | None, tf_keras_installed: bool = True
) -> int:
    """The Keras major version behind `tf.keras` (tf_keras is Keras 2; the keras package says its own)."""
    if tf_keras_package(tensorflow_version, legacy, tf_keras_installed) == "tf_keras":
        return 2
    found = version_tuple(keras_version)
    if found is not None:
        return found[0]
    return 2 if tensorflow_version is not None and tensorflow_version < FIRST_KERAS3 else 3


def version_tuple(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of a version string ("2.15.1", "2.16.0rc0", "3.0.5"), None when it cannot be read."""
    parts = (version or "").split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (ValueError, IndexError):
        return None


def layer_compute_dtype(layer: object) -> str | None:
    """A layer's compute dtype by name (`float16`): Keras 2 gives a string, Keras 3 a dtype; None without one."""
    dtype = getattr(layer, "compute_dtype", None)
    return getattr(dtype, "name", dtype) if dtype is not None else None


def sublayers(layer: object, *, recursive: bool, include_self: bool = False) -> list[Any]:  # live Keras layers
    """The layers tracked by a layer or model (Keras' own `_flatten_layers`; its `layers` list for objects without
    it), recursively or only the direct ones."""
    try:
        return list(layer._flatten_layers(include_self=include_self, recursive=recursive))  # type: ignore[attr-defined]
    except Exception:
        found = list(getattr(layer, "layers", None) or [])
        return [layer, *found] if include_self else found


def layer_policy(layer: object) -> tuple[str | None, str | None, str | None]:
    """(policy name, compute dtype, variable dtype) of a live layer."""
    policy = getattr(layer, "dtype_policy", None) or getattr(layer, "_dtype_policy", None)
    name = getattr(policy, "name", None)
    return name, getattr(policy, "compute_dtype", None), getattr(policy, "variable_dtype", None)


# --------------------------------------------------------------------------------------------- activations
# Activations whose float16 result saturates or overflows (MP401): `activation=` strings and what they compute.
# The scale a dynamic LossScaleOptimizer starts at, Keras 3 and tf_keras alike (their `initial_scale` default).
INITIAL_LOSS_SCALE = 2.0**15

RISKY_ACTIVATIONS = {"softmax": "softmax", "log_softmax": "log_softmax", "sigmoid": "sigmoid", "exponential": "exp"}
# Layer classes that are activations in themselves.
ACTIVATION_LAYERS = {
    "Softmax": "softmax",
    "ReLU": "relu",
    "LeakyReLU": "leaky_relu",
    "ELU": "elu",
    "PReLU": "prelu",
    "ThresholdedReLU": "thresholded_relu",
}


def risky_activation(class_name: str, activation: str | None) -> str | None:
    """The saturating activation a layer applies last (softmax, log_softmax, sigmoid, exp), from its class name and
    its `activation` as the trace records it (a function name)."""
    if activation in RISKY_ACTIVATIONS.values():
        return activation
    if ACTIVATION_LAYERS.get(class_name) == "softmax":
        return "softmax"
    return None


# ------------------------------------------------------------------------------------ per-layer policy, as code


def keep_float32_snippet(flavour: str, model: str, paths: list[list[str]], keras_module: str, indent: str) -> str:
    """Source lines that switch already-built layers of `model` (reached by their `get_layer` name paths) to
    float32 compute, for the Keras line `flavour`; "" when it cannot be written. Keras 3: assigning `dtype_policy`
    to a built layer takes effect at its next call, for the layer and each of its sublayers (a block keeps its own
    sublayers' policies). tf_keras has no public policy setter: the model is rebuilt by `clone_model` with a
    `clone_function` giving those layers `dtype="float32"` (top-level layers only), and the weights are copied
    over (`mixed_*` variables are float32 either way). Keras 2.13-2.15 is tf_keras' codebase: the same rebuild.
    `flavour` is the graph's: KERAS3, TF_KERAS or KERAS2."""
    lines = [f"{indent}# mpdoctor plan: keep these layers in float32"]
    if flavour == KERAS3:
        for path in paths:
            chain = "".join(f".get_layer({name!r})" for name in path)
            lines.append(f"{indent}for _layer in {model}{chain}._flatten_layers():")
            lines.append(f'{indent}    _layer.dtype_policy = "float32"')
        return "\n".join(lines) + "\n"
    if flavour in (TF_KERAS, KERAS2) and all(len(path) == 1 for path in paths):
        names = ", ".join(repr(path[0]) for path in paths)
        lines += [
            f"{indent}_weights = {model}.get_weights()",
            f"{indent}{model} = {keras_module}.models.clone_model(",
            f"{indent}    {model},",
            f"{indent}    clone_function=lambda layer: layer.__class__.from_config(",
            f'{indent}        {{**layer.get_config(), "dtype": "float32"}} if layer.name in ({names},) else '
            "layer.get_config()",
            f"{indent}    ),",
            f"{indent})",
            f"{indent}{model}.set_weights(_weights)",
        ]
        return "\n".join(lines) + "\n"
    return ""


# ----------------------------------------------------------------------------- layer classes the rules single out
# Keras class names that a rule treats specially, kept here with the rest of Keras' behaviour (issue 28).

# Layers whose policy is harmless or meaningless when created before the policy call (MP101).
POLICY_NEUTRAL_LAYERS = frozenset(
    {
        "Input",
        "InputLayer",
        "Rescaling",
        "Resizing",
        "CenterCrop",
        "Normalization",
        "TextVectorization",
        "StringLookup",
        "IntegerLookup",
        "CategoryEncoding",
        "Hashing",
        "Discretization",
        "HashedCrossing",
        "RandomFlip",
        "RandomRotation",
        "RandomZoom",
        "RandomTranslation",
        "RandomContrast",
        "RandomCrop",
        "RandomBrightness",
        "RandomHeight",
        "RandomWidth",
        "AutoContrast",
        "Pipeline",
    }
)
# Wrappers whose first argument is the layer they run (MP401 looks through them).
WRAPPER_LAYERS = ("TimeDistributed", "Bidirectional")
# The class names of SAVEDMODEL_LAYERS, as `float32_fix` matches a layer's class.
SAVEDMODEL_LAYER_CLASSES = tuple(SAVEDMODEL_LAYER_APIS)
# keras.applications whose include_top is not the first parameter: its positional index (Keras 2, Keras 3) (MP401).
# Anything with more positional arguments than the index of classifier_activation (>= 6 everywhere) is left alone.
INCLUDE_TOP_POSITION = {
    "MobileNet": (4, 4),
    "MobileNetV2": (2, 2),
    "MobileNetV3Small": (3, 3),
    "MobileNetV3Large": (3, 3),
    "NASNetMobile": (1, 1),
    "NASNetLarge": (1, 1),
    **{f"ConvNeXt{s}": (1, 0) for s in ("Tiny", "Small", "Base", "Large", "XLarge")},
}


# ------------------------------------------------------------------------- layers and ops in the trace's graph
# What the trace child's dtype prediction (mpdoctor.trace.child.dtype_prediction) knows of Keras layer and operation
# classes and TF ops, by name: it never imports Keras.

# Built-in layers that produce floats from integer inputs.
FLOAT_PRODUCERS = frozenset({"Embedding", "CategoryEncoding", "ReversibleEmbedding"})
# tf_keras layers wrapping a TF op called on a symbolic tensor: kind "op" in the graph.
TF_OP_LAYERS = frozenset(
    {
        "TFOpLambda",
        "SlicingOpLambda",
        "InstanceMethod",
        "InstanceProperty",
        "ClassMethod",
        "TFClassMethodDispatcher",
        "KerasOpDispatcher",
    }
)
# Keyword arguments of a TF op that name its output dtype.
DTYPE_KWARGS = ("dtype", "out_type", "output_type", "Tout")
_BOOL_OPS = (
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_not",
    "logical_xor",
    "is_nan",
    "is_inf",
    "is_finite",
    "eq",
    "ne",
)
# Output dtypes of TF ops (tf_keras TFOpLambda symbols, last component) that do not follow their input ...
TF_OP_DTYPES = {
    **{name: "bool" for name in _BOOL_OPS},
    "argmax": "int64",
    "argmin": "int64",
    "shape": "int32",
    "size": "int32",
    "rank": "int32",
}
# ... and of Keras 3 operations (class names).
KERAS3_OP_DTYPES = {
    **{
        name: "bool"
        for name in (
            "Equal",
            "NotEqual",
            "Less",
            "LessEqual",
            "Greater",
            "GreaterEqual",
            "LogicalAnd",
            "LogicalOr",
            "LogicalNot",
            "LogicalXor",
            "IsNan",
            "IsInf",
            "IsFinite",
        )
    },
    "Argmax": "int32",
    "Argmin": "int32",
}


# Layer class -> the arguments that size it, (positional index, keyword): what tensor cores want in multiples of 8
# (MP601).
SIZE_ARGUMENTS: dict[str, tuple[tuple[int, str], ...]] = {
    "Dense": ((0, "units"),),
    **{
        kind: ((0, "filters"),)
        for kind in (
            "Conv1D",
            "Conv2D",
            "Conv3D",
            "Convolution1D",
            "Convolution2D",
            "Convolution3D",
            "Conv1DTranspose",
            "Conv2DTranspose",
            "Conv3DTranspose",
            "Convolution2DTranspose",
            "Convolution3DTranspose",
            "SeparableConv1D",
            "SeparableConv2D",
            "SeparableConvolution1D",
            "SeparableConvolution2D",
        )
    },
    "Embedding": ((0, "input_dim"), (1, "output_dim")),
}


# ---------------------------------------------------------------- layers that keep their input's size (topology)

# Layers without weights that keep the size of their input: the layer before them fixes the output size (MP601).
PASS_THROUGH_LAYERS = frozenset(
    {
        "Activation",
        "Softmax",
        "ReLU",
        "LeakyReLU",
        "ELU",
        "PReLU",
        "Identity",
        "Dropout",
        "Reshape",
        "Flatten",
        "Lambda",
    }
)


# ----------------------------------------------------------------------------------------- Keras 3 quantization
# Which built-in layer classes implement `quantize(mode)` and a quantized call, per mode (Keras 3.15.1, read from
# keras/src/layers/core/*.py and measured: `layer.quantize(mode)` on a built layer). Every other layer, and every
# subclass of these (their `quantize` checks `type(self) is Dense`, ...), is skipped by `Model.quantize` with only a
# UserWarning "Layer X does not have a `quantize` method implemented" and stays float.
QUANTIZABLE_LAYERS: dict[str, tuple[str, ...]] = {
    "Dense": ("int8", "int4", "float8", "gptq", "awq"),
    "EinsumDense": ("int8", "int4", "float8", "gptq", "awq"),
    "Embedding": ("int8", "int4"),
    "ReversibleEmbedding": ("int8", "int4"),
}
# Keras 3 dtype policy classes whose instances are quantized policies (`keras.dtype_policies.*`).
QUANTIZED_POLICY_CLASSES = (
    "QuantizedDTypePolicy",
    "QuantizedFloat8DTypePolicy",
    "Int4DTypePolicy",
    "GPTQDTypePolicy",
    "AWQDTypePolicy",
)
