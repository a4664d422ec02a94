"""Sample batches that match the model (trace child): the numerics' float16 and float32 runs and the trace's one
call of each model are fed a batch built here.

- Structure: the model's own input structure (one tensor, a list, a dict of named inputs as every keras-hub text
  model takes: `{"token_ids", "padding_mask", "segment_ids"}`, or nested), never a flat list of a dict model.
- Dtypes: each input's own. Floats uniform in [low, high) (pixel values or features, non-negative by default);
  integer ids uniform in the range of the vocabulary of the Embedding that consumes them (found by following the
  input through the functional graph, nested models included), zero when no Embedding does; masks (an input whose
  name says `mask`, of any dtype) 1 with a padded tail in the second row; booleans true; strings empty.
- Sizes: the batch dimension is the batch size; a dimension the model leaves open (`input_shape=None`: images
  `(None, None, None, 3)`, token sequences `(None, None)`) gets the size the model declares where it has one (a
  keras-hub preprocessor's image size or sequence length), otherwise the smallest size from 32 up for which no
  layer output has a zero dimension, found by shape inference (no arithmetic): Keras' own per-layer output shapes,
  or the model traced into a TensorFlow graph where those cannot tell, stopping at the first empty output. Feeding
  2x2 images to a network of stride-2 layers gives empty tensors, and pooling over nothing gives NaN in both
  precisions. A size that no inference accepts (the model fails whatever the size) falls back to 32 and the
  model's call says what is wrong.
- `--sample FILE.npz`: arrays by input name (dict inputs need every name), else in file order.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from mpdoctor.facts.keras_semantics import KERAS3, TF_KERAS, flavour_of, sublayers
from mpdoctor.facts.trace_request import NumericsRequest
from mpdoctor.trace.child import backends

MIN_OPEN_SIZE = 32  # no open dimension gets less (a stride-32 network reduces 32 to 1x1)
_LADDER = (64, 96, 128, 160, 192, 224, 256, 512, 1024)  # sizes tried after 32
SEARCH_SECONDS = 30.0
_MASK_NAME = re.compile(r"mask", re.IGNORECASE)
# Errors of shape inference that a larger (or smaller) size may cure: a kernel larger than its input, position
# embeddings shorter than the sequence.
_SHAPE_ERROR = re.compile(r"dimension|shape|size|incompatible|broadcast|must be|out of range", re.IGNORECASE)


class SampleError(Exception):
    """The sample batch cannot be built (the reason is the message)."""


@dataclass
class Spec:
    """One model input: where it sits in the structure, its name, shape (None = open) and dtype name."""

    name: str
    shape: list[int | None]
    dtype: str
    tensor: object = None  # the symbolic input tensor, to follow to its consumers


@dataclass
class Sample:
    value: object  # the batch, in the model's input structure
    batch_size: int
    open_size: int | None = None  # the size given to open dimensions, None when there were none
    open_size_how: str | None = None  # "declared" | "shape inference" | "fallback"


# ---------------------------------------------------------------------------------------------------- structure


def input_structure(model):
    """The model's symbolic inputs in the structure its call takes (a tensor, list or dict, nested), or None."""
    for holder in (model, getattr(model, "_functional", None)):  # Keras 3 Sequential keeps its graph there
        if holder is None:
            continue
        structure = getattr(holder, "_inputs_struct", None)  # Keras 3 Functional
        if structure is None:
            structure = getattr(holder, "_nested_inputs", None)  # tf_keras Functional and Sequential
        if structure is not None:
            return structure
    inputs = getattr(model, "inputs", None)
    if not inputs:
        return None
    return inputs[0] if len(inputs) == 1 else list(inputs)


def _map(structure, fn, path=()):
    """`fn(leaf, path)` over a nested structure of lists, tuples and dicts, keeping the structure."""
    if isinstance(structure, Mapping):
        return {key: _map(value, fn, (*path, key)) for key, value in structure.items()}
    if isinstance(structure, (list, tuple)):
        items = [_map(value, fn, (*path, i)) for i, value in enumerate(structure)]
        return type(structure)(*items) if hasattr(structure, "_fields") else type(structure)(items)
    return fn(structure, path)


def _leaves(structure) -> list:
    found = []
    _map(structure, lambda leaf, path: found.append((leaf, path)))
    return found


def _spec(tensor, path) -> Spec:
    keys = [p for p in path if isinstance(p, str)]
    name = keys[-1] if keys else str(getattr(tensor, "name", "") or "").split(":")[0]
    dims = list(tensor.shape) if getattr(tensor, "shape", None) is not None else []
    shape = [None if d is None else int(getattr(d, "value", d)) for d in dims]
    dtype = getattr(tensor.dtype, "name", tensor.dtype)
    return Spec(name, shape, str(dtype), tensor)


# ---------------------------------------------------------------------------------------------------- entry


def sample_batch(model, options: NumericsRequest) -> Sample | None:
    """The sample batch of `model` (options: batch_size, seed, range, sample), None when the model declares no
    inputs and none are known. Raises SampleError."""
    structure = input_structure(model)
    if options.sample:
        value = load_sample(options.sample, structure)
        first = _leaves(value)[0][0] if _leaves(value) else None
        return Sample(value, int(first.shape[0]) if getattr(first, "shape", None) else int(options.batch_size))
    if structure is None:
        structure = _known_shapes(model)
        if structure is None:
            return None
    specs = _map(structure, _spec)
    flat = [spec for spec, _ in _leaves(specs)]
    batch_size = int(options.batch_size)
    size, how = None, None
    if any(d is None for spec in flat for d in spec.shape[1:]):
        size, how = open_size(model, specs, batch_size)
    bounds = {id(spec): vocabulary_bound(model, spec.tensor) for spec in flat if _is_integer(spec.dtype)}
    low, high = options.range
    rng = _rng(options.seed)
    value = _map(specs, lambda spec, path: _array(spec, batch_size, size, bounds.get(id(spec)), rng, low, high))
    return Sample(value, batch_size, size, how)


def _known_shapes(model):
    """The inputs of a subclassed model whose input shape is known (built or called before)."""
    from mpdoctor.trace.child.probe import known_input_shapes

    shapes = known_input_shapes(model)
    if not shapes:
        return None
    specs = [_Known(shape, dtype) for shape, dtype in shapes]
    return specs[0] if len(specs) == 1 else specs


class _Known:
    def __init__(self, shape, dtype) -> None:
        self.shape, self.dtype, self.name = list(shape), dtype, ""


def _rng(seed: int):
    import numpy as np

    return np.random.default_rng(seed)


def _is_integer(dtype: str) -> bool:
    import numpy as np

    try:
        return np.dtype(dtype).kind in "iu"
    except TypeError:
        return False


def _dims(spec: Spec, batch_size: int, size: int | None) -> list[int]:
    return [batch_size if i == 0 else (size or batch_size) if d is None else d for i, d in enumerate(spec.shape)]


def _array(spec: Spec, batch_size: int, size: int | None, bound: int | None, rng, low: float, high: float):
    import numpy as np

    shape = _dims(spec, batch_size, size)
    try:
        dtype = np.dtype(spec.dtype)
    except TypeError:
        dtype = np.dtype("float32")  # bfloat16 and other dtypes numpy does not know: fed as float32
    if dtype.kind in "SOU" or spec.dtype == "string":
        return np.array([""] * int(np.prod(shape)), dtype=object).reshape(shape)
    if _MASK_NAME.search(spec.name) and dtype.kind in "iubf":  # a float mask too: 0/1, never random values
        return _mask(shape).astype(dtype)
    if dtype.kind == "b":
        return np.ones(shape, dtype=dtype)
    if dtype.kind in "iu":
        if bound and bound > 1:
            return rng.integers(0, bound, size=shape).astype(dtype)
        return np.zeros(shape, dtype=dtype)
    return (rng.random(shape) * (high - low) + low).astype(dtype)


def _mask(shape: list[int]):
    """1 everywhere, except a padded tail (the last quarter of the last axis) in the second row: real batches of
    text have padding, and masking code is where float16 mask constants go wrong."""
    import numpy as np

    mask = np.ones(shape, dtype="int32")
    if len(shape) >= 2 and shape[0] >= 2 and shape[-1] >= 4:
        mask[1, ..., shape[-1] - shape[-1] // 4 :] = 0
    return mask


# ---------------------------------------------------------------------------------------------------- --sample


def load_sample(path: str, structure):
    """Arrays of an .npz file in the model's input structure: a dict model takes them by name (every name must be
    there); otherwise by input name when all names match, else in file order."""
    import numpy as np

    with np.load(path, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    if not arrays:
        raise SampleError(f"--sample {path} holds no arrays")
    if isinstance(structure, Mapping):
        missing = [key for key in structure if key not in arrays]
        if missing:
            raise SampleError(
                f"--sample {path} has no array named {', '.join(map(repr, missing))} (the model takes "
                f"{', '.join(map(repr, structure))}; found {', '.join(map(repr, arrays))})"
            )
        return {key: _nested_sample(arrays, structure[key], key) for key in structure}
    leaves = [_spec(leaf, path).name for leaf, path in _leaves(structure)] if structure is not None else []
    if leaves and all(name in arrays for name in leaves):
        ordered = [arrays[name] for name in leaves]
    else:
        ordered = list(arrays.values())
    return ordered[0] if len(ordered) == 1 else ordered


def _nested_sample(arrays: dict, structure, key: str):
    if isinstance(structure, Mapping):
        return {k: arrays[f"{key}/{k}"] if f"{key}/{k}" in arrays else arrays[k] for k in structure}
    return arrays[key]


# ---------------------------------------------------------------------------------------------------- vocabularies


def _producer(tensor):
    history = getattr(tensor, "_keras_history", None)
    return history[0] if history is not None else None


def _node_inputs(node) -> list:
    inputs = getattr(node, "input_tensors", None)  # Keras 3
    if inputs is None:
        inputs = getattr(node, "keras_inputs", None)  # tf_keras
    if inputs is None:
        return []
    if not backends.tensorflow():  # Keras 3's own nest, same order as tf.nest
        import keras

        return keras.tree.flatten(inputs)
    import tensorflow as tf

    return tf.nest.flatten(inputs)


def _consumers(tensor):
    """(layer, position among its call's flat inputs) of every layer the input tensor feeds."""
    producer = _producer(tensor)
    for node in getattr(producer, "_outbound_nodes", None) or []:
        layer = getattr(node, "operation", None) or getattr(node, "layer", None)
        for position, fed in enumerate(_node_inputs(node)):
            if fed is tensor or _producer(fed) is producer:
                yield layer, position


def _input_dim(layer) -> int | None:
    value = getattr(layer, "input_dim", None)
    return value if isinstance(value, int) and value > 0 else None


def vocabulary_bound(model, tensor, depth: int = 0) -> int | None:
    """The largest id + 1 an integer input may hold: the smallest vocabulary among the Embeddings it feeds
    (directly, through nested models, or inside a layer that embeds it such as TokenAndPositionEmbedding). None
    when it feeds no Embedding."""
    if tensor is None or depth > 8:
        return None
    bounds = []
    try:
        consumers = list(_consumers(tensor))
    except Exception:
        return None
    for layer, position in consumers:
        inner_inputs = getattr(layer, "inputs", None) if hasattr(layer, "_outbound_nodes") else None
        if inner_inputs and hasattr(layer, "layers") and position < len(inner_inputs):
            bound = vocabulary_bound(layer, inner_inputs[position], depth + 1)  # a nested model
        else:
            bound = _input_dim(layer)
            if bound is None:
                dims = [d for d in (_input_dim(sub) for sub in sublayers(layer, recursive=True)) if d]
                bound = min(dims) if dims else None
        if bound:
            bounds.append(bound)
    return min(bounds) if bounds else None


# ---------------------------------------------------------------------------------------------------- open sizes


def _declared_size(model) -> int | None:
    """A size the model declares for its open dimensions: a keras-hub preprocessor's image size or sequence
    length."""
    preprocessor = getattr(model, "preprocessor", None)
    if preprocessor is None:
        return None
    converter = getattr(preprocessor, "image_converter", None)
    image_size = getattr(converter, "image_size", None)
    if isinstance(image_size, (list, tuple)) and image_size and all(isinstance(d, int) for d in image_size):
        return max(image_size)
    length = getattr(preprocessor, "sequence_length", None)
    return length if isinstance(length, int) and length > 0 else None


def open_size(model, specs, batch_size: int) -> tuple[int, str]:
    """(size for the open dimensions, how it was chosen). Sizes are tried upwards from 32 (steps of 32 up to 256,
    then 512 and 1024), then the step that worked is narrowed down to the smallest size that works. Keras' symbolic
    shape inference makes a try cost a tenth of a second; a model that needs a traced graph instead pays seconds per
    try, so the search stops after SEARCH_SECONDS and keeps what it has."""
    declared = _declared_size(model)
    if declared:
        return declared, "declared"
    cache: dict[int, str | None] = {}
    deadline = time.monotonic() + SEARCH_SECONDS

    def problem(size: int) -> str | None:
        if size not in cache:
            cache[size] = _shape_problem(model, specs, batch_size, size) if time.monotonic() < deadline else "time"
        return cache[size]

    first = problem(MIN_OPEN_SIZE)
    if first is None:
        return MIN_OPEN_SIZE, "shape inference"
    if first == "error":
        return MIN_OPEN_SIZE, "fallback"  # not a matter of size: the model's own call fails; let it say so
    failing, size = MIN_OPEN_SIZE, None
    for candidate in _LADDER:
        verdict = problem(candidate)
        if verdict is None:
            size = candidate
            break
        if verdict == "time":
            return MIN_OPEN_SIZE, "fallback"
        failing = candidate
    if size is None:
        return _smaller_size(problem) or (MIN_OPEN_SIZE, "fallback")
    while size - failing > 1:  # the smallest size that works, between the last failing one and the first good one
        middle = (failing + size) // 2
        verdict = problem(middle)
        if verdict == "time":
            break
        if verdict is None:
            size = middle
        else:
            failing = middle
    return size, "shape inference"


def _smaller_size(problem) -> tuple[int, str] | None:
    """Below the minimum, for models whose open dimension has an upper limit (position embeddings shorter than 32)."""
    size = MIN_OPEN_SIZE // 2
    while size >= 1:
        verdict = problem(size)
        if verdict is None:
            return size, "shape inference"
        if verdict == "time":
            return None
        size //= 2
    return None


class _Empty(Exception):
    """A layer output with a zero dimension: the size is too small (stops the trace there)."""


def _shape_problem(model, specs, batch_size: int, size: int) -> str | None:
    """None when no layer output of the model on inputs of this size has a zero dimension; "empty" / "shape" when
    one has or shape inference rejects the size; "error" for any other failure. Keras' own symbolic shape inference
    first (per-layer output shapes, no TensorFlow graph: a tenth of a second for InceptionV3), the model traced into
    a TensorFlow graph when that cannot tell."""
    flavour = flavour_of(model)
    symbolic = _keras3_symbolic if flavour == KERAS3 else _tf_keras_symbolic if flavour == TF_KERAS else None
    if symbolic is not None:
        method = "compute_output_spec" if flavour == KERAS3 else "compute_output_shape"
        verdict = _checked(lambda: symbolic(model, specs, batch_size, size), model, method)
        if verdict != "error":
            return verdict
    if not backends.tensorflow():  # no TensorFlow graph to trace on JAX or PyTorch: the size is not known bad
        return "error"
    return _checked(lambda: _graph_trace(model, specs, batch_size, size), model, "call")


def _keras3_symbolic(model, specs, batch_size: int, size: int) -> None:
    import keras

    model.compute_output_spec(
        _map(specs, lambda spec, path: keras.KerasTensor(_dims(spec, batch_size, size), dtype=spec.dtype))
    )


def _tf_keras_symbolic(model, specs, batch_size: int, size: int) -> None:
    import tensorflow as tf

    if not hasattr(model, "_nested_inputs"):  # only graph networks infer shapes layer by layer
        raise _NotSymbolic
    model.compute_output_shape(_map(specs, lambda spec, path: tf.TensorShape(_dims(spec, batch_size, size))))


def _graph_trace(model, specs, batch_size: int, size: int) -> None:
    import tensorflow as tf

    signature = _map(specs, lambda spec, path: tf.TensorSpec(_dims(spec, batch_size, size), _tf_dtype(spec.dtype)))
    tf.function(lambda batch: model(batch, training=False)).get_concrete_function(signature)


class _NotSymbolic(Exception):
    """This model has no symbolic shape inference to use."""


def _checked(infer, model, method: str) -> str | None:
    """Run a shape inference with `method` of every layer wrapped to stop at the first output with a zero
    dimension."""
    from mpdoctor.trace.child.probe import MISSING

    patched = []
    for layer in sublayers(model, recursive=True):
        original = getattr(layer, method, None)
        if original is None:
            continue
        patched.append((layer, layer.__dict__.get(method, MISSING), method))
        object.__setattr__(layer, method, _zero_checker(original))
    try:
        infer()
    except _NotSymbolic:
        return "error"
    except Exception as exc:
        if _caused_by_empty(exc):
            return "empty"
        # Shape inference rejects a size with a ValueError (or TF's InvalidArgumentError); anything else
        # (NotImplementedError: a layer that cannot infer its shape) says nothing about the size.
        rejected = isinstance(exc, ValueError) or type(exc).__name__ == "InvalidArgumentError"
        return "shape" if rejected and _SHAPE_ERROR.search(str(exc)) else "error"
    finally:
        _restore_methods(patched)
    return None


def _restore_methods(patched) -> None:
    from mpdoctor.trace.child.probe import MISSING

    for layer, original, method in reversed(patched):
        if original is MISSING:
            object.__delattr__(layer, method)
        else:
            object.__setattr__(layer, method, original)


def _caused_by_empty(exc: BaseException) -> bool:
    """Keras wraps exceptions raised inside a layer's call: look through the chain."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, _Empty):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _tf_dtype(name: str):
    import tensorflow as tf

    return tf.string if name in ("string", "object") else tf.as_dtype(name)


def _zero_checker(bound):
    def method(*args, **kwargs):
        result = bound(*args, **kwargs)
        for shape in _shapes(result):
            if any(d is not None and d <= 0 for d in shape):
                raise _Empty(f"an output of shape {shape}")
        return result

    return method


def _shapes(result) -> list[list]:
    """The shapes in a layer's output (tensors, KerasTensors) or in what compute_output_shape returns (TensorShape,
    tuples of ints, nested)."""
    found = []

    def visit(value):
        if isinstance(value, (str, bytes)):
            return
        if isinstance(value, Mapping):
            for item in value.values():
                visit(item)
            return
        shape = getattr(value, "shape", None)
        if shape is not None and not isinstance(value, (tuple, list)):
            value = shape
        try:
            dims = list(value) if hasattr(value, "__iter__") else None
        except (TypeError, ValueError):  # unknown rank
            return
        if dims is None:
            return
        if all(d is None or isinstance(getattr(d, "value", d), int) for d in dims):
            found.append([None if d is None else int(getattr(d, "value", d)) for d in dims])
        else:
            for item in dims:
                visit(item)

    visit(result)
    return found
