"""Map the text of an exception raised while building or calling a model to the rule that explains it.

Pure string matching (no TensorFlow import), so it runs in the parent on the facts' `exception` record. Every
pattern below was reproduced on TF 2.21 / Keras 3.15 / tf_keras 2.21; the exact messages are the test data in
tests/test_trace_exceptions.py.

`classify_exception(exc_type, message)` returns None when no rule explains the exception (MP001 then reports it),
else a dict with "code" and the details the rule needs:

- MP201 (a tensor reaches a SavedModel function with a dtype it was not traced for):
  {"code": "MP201", "received": "float16", "accepted": ["float32"], "pattern": ...}
  (+ "arg_index" for "Expects arg[i] ...", + "function" when the failing op is a loaded function)
- MP406 (float16/bfloat16 meets float32 inside one op of a layer):
  {"code": "MP406", "op": "Mul" | None, "expected": "float16", "received": "float32", "pattern": ...}
  (+ "input"/"argument" names of the op's inputs, "input_index", or "dtypes" for list inputs such as ConcatV2)
- MP104 (a `hub.KerasLayer` in a Keras 3 model): {"code": "MP104", "reason": "sequential" | "keras_tensor",
  "received_class": "tensorflow_hub.keras_layer.KerasLayer" | None}
- MP301 (a checkpoint value restored into a variable of another dtype):
  {"code": "MP301", "tensors": [{"name": "dense/kernel", "variable_dtype": "float16",
   "checkpoint_dtype": "float32"}], "variable_dtype": ..., "checkpoint_dtype": ...}  (first tensor's dtypes)

All results also carry "layer" and "layer_class" when the message names the Keras layer whose call raised
("Exception encountered when calling layer 'keras_layer' (type KerasLayer)" / "... calling TFSMLayer.call()").
Dtypes are tf.DType names ("float16", not TF's C++ "half").

Only dtype problems that involve float16 or bfloat16 are claimed for MP201/MP406: a float32 tensor fed to an int32
function, or a shape mismatch reported by the same messages, is not a mixed-precision problem.
"""

from __future__ import annotations

import re

LOW_PRECISION = frozenset({"float16", "bfloat16"})
FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
_CPP_DTYPE_NAMES = {"half": "float16", "float": "float32", "double": "float64"}

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DTYPE = r"(?:tf\.)?[A-Za-z][A-Za-z0-9_]*"

# Context: which layer raised.
_LAYER_TF_KERAS = re.compile(r"Exception encountered when calling layer [\"']([^\"']+)[\"'] \(type (\w+)\)")
_LAYER_KERAS3 = re.compile(r"Exception encountered when calling (\w+)\.call\(\)")

# MP104
_SEQUENTIAL_NOT_LAYER = re.compile(r"Only instances of `?keras\.Layer`? can be added to a Sequential model")
_RECEIVED_CLASS = re.compile(r"\(of type <class '([^']+)'>\)")
_KERAS_TENSOR_TO_TF = "A KerasTensor cannot be used as input to a TensorFlow function"

# MP301
_RESTORE_DTYPE = re.compile(r"tensor_name = (\S+?); expected dtype (\w+) does not equal original dtype (\w+)")

# MP201
_CANNOT_CAST = re.compile(rf"Can not cast TensorSpec\([^`]*?dtype=({_DTYPE})[^`]*?\) to "
                          rf"TensorSpec\([^`]*?dtype=({_DTYPE})")
_NO_MATCHING_CONCRETE = "Could not find matching concrete function to call loaded from the SavedModel"
_GOT_TENSOR_DTYPE = re.compile(rf"<tf\.Tensor [^>]*?dtype=({_DTYPE})>")
_SPEC_DTYPE = re.compile(rf"TensorSpec\(.*?dtype=({_DTYPE})", re.DOTALL)
_EXPECTS_ARG = re.compile(rf"Expects arg\[(\d+)\] to be ({_DTYPE}) but ({_DTYPE}) is provided")

# MP201 when the op is a loaded function, MP406 otherwise
_CANNOT_COMPUTE = re.compile(rf"cannot compute (\S+) as input #(\d+)\(zero-based\) was expected to be an? "
                             rf"({_DTYPE}) tensor but is an? ({_DTYPE}) tensor")
_FUNCTION_OP = re.compile(r"^(?:__inference_|__forward_|__backward_|StatefulPartitionedCall|PartitionedCall)"
                          r"|signature_wrapper")

# MP406
_INPUT_OF_OP = re.compile(rf"Input '(\w+)' of '(\w+)' Op has type ({_DTYPE}) that does not match type "
                          rf"({_DTYPE}) of argument '(\w+)'")
_LIST_OF_OP = re.compile(r"Tensors in list passed to '(\w+)' of '(\w+)' Op have types \[([^\]]*)\] "
                         r"that don't all match")
_CONVERSION = re.compile(rf"(?:(\w+): )?Tensor conversion requested dtype ({_DTYPE}) for Tensor with dtype "
                         rf"({_DTYPE})")
# tf.experimental.numpy / math_ops dtype checks: "`x` and `y` must have the same dtype, got tf.float16 != tf.float32."
_SAME_DTYPE = re.compile(rf"must have the same dtype, got ({_DTYPE}) != ({_DTYPE})")
_LOOSE_EXPECTED = re.compile(rf"\bexpected (?:an? )?({_DTYPE}) (?:tensor )?but (?:is|got|received) (?:an? )?"
                             rf"({_DTYPE})\b")


def dtype_name(text: str) -> str:
    """'half' / 'tf.float16' / 'float16' -> 'float16'; 'float' -> 'float32'."""
    text = text.strip().strip("'\"")
    text = text.removeprefix("tf.")
    return _CPP_DTYPE_NAMES.get(text, text)


def _is_precision_mismatch(received: str, accepted) -> bool:
    accepted = set(accepted)
    if not accepted or received in accepted:
        return False
    involved = {received} | accepted
    return bool(involved & LOW_PRECISION) and received in FLOATS and bool(accepted & FLOATS)


def _layer_context(message: str) -> dict:
    match = _LAYER_TF_KERAS.search(message)
    if match:
        return {"layer": match.group(1), "layer_class": match.group(2)}
    match = _LAYER_KERAS3.search(message)
    if match:
        return {"layer": None, "layer_class": match.group(1)}
    return {}


def classify_exception(exc_type: str, message: str) -> dict | None:
    """The rule explaining an exception (see the module docstring), or None."""
    message = _ANSI.sub("", message or "")
    for classify in (_hub_on_keras3, _checkpoint_dtype, _savedmodel_input, _dtype_conflict):
        found = classify(message)
        if found is not None:
            context = _layer_context(message)
            return {**found, **{key: value for key, value in context.items() if key not in found}}
    return None


def _hub_on_keras3(message: str) -> dict | None:
    if _SEQUENTIAL_NOT_LAYER.search(message):
        received = _RECEIVED_CLASS.search(message)
        received_class = received.group(1) if received else None
        if "tensorflow_hub" in message or (received_class or "").endswith("KerasLayer"):
            return {"code": "MP104", "reason": "sequential", "received_class": received_class}
        return None
    if _KERAS_TENSOR_TO_TF in message and ("(type KerasLayer)" in message or "tensorflow_hub" in message):
        return {"code": "MP104", "reason": "keras_tensor", "received_class": "tensorflow_hub.keras_layer.KerasLayer"}
    return None


def _checkpoint_dtype(message: str) -> dict | None:
    tensors, seen = [], set()
    for name, expected, original in _RESTORE_DTYPE.findall(message):
        if name in seen:
            continue
        seen.add(name)
        tensors.append({"name": name, "variable_dtype": dtype_name(expected), "checkpoint_dtype": dtype_name(original)})
    if not tensors:
        return None
    return {"code": "MP301", "tensors": tensors, "variable_dtype": tensors[0]["variable_dtype"],
            "checkpoint_dtype": tensors[0]["checkpoint_dtype"]}


def _mp201(received: str, accepted, pattern: str, **extra) -> dict | None:
    accepted = sorted({dtype_name(dtype) for dtype in accepted})
    received = dtype_name(received)
    if not _is_precision_mismatch(received, accepted):
        return None
    return {"code": "MP201", "received": received, "accepted": accepted, "pattern": pattern, **extra}


def _savedmodel_input(message: str) -> dict | None:
    match = _CANNOT_CAST.search(message)
    if match:
        return _mp201(match.group(1), [match.group(2)], "cannot_cast_tensorspec")
    if _NO_MATCHING_CONCRETE in message:
        got, _, expected = message.partition("Expected these arguments to match")
        received = _GOT_TENSOR_DTYPE.search(got)
        options = re.split(r"Option \d+:", expected)[1:] or [expected]
        accepted = [found.group(1) for found in (_SPEC_DTYPE.search(option) for option in options) if found]
        if received and accepted:
            return _mp201(received.group(1), accepted, "no_matching_concrete_function")
        return None
    match = _EXPECTS_ARG.search(message)
    if match:
        return _mp201(match.group(3), [match.group(2)], "expects_arg", arg_index=int(match.group(1)))
    match = _CANNOT_COMPUTE.search(message)
    if match and _FUNCTION_OP.search(match.group(1)):
        return _mp201(match.group(4), [match.group(3)], "function_input", function=match.group(1),
                      arg_index=int(match.group(2)))
    return None


def _mp406(op, expected: str, received: str, pattern: str, **extra) -> dict | None:
    expected, received = dtype_name(expected), dtype_name(received)
    if not _is_precision_mismatch(received, [expected]):
        return None
    return {"code": "MP406", "op": op, "expected": expected, "received": received, "pattern": pattern, **extra}


def _dtype_conflict(message: str) -> dict | None:
    match = _CANNOT_COMPUTE.search(message)
    if match and not _FUNCTION_OP.search(match.group(1)):
        return _mp406(match.group(1), match.group(3), match.group(4), "cannot_compute",
                      input_index=int(match.group(2)))
    match = _INPUT_OF_OP.search(message)
    if match:
        return _mp406(match.group(2), match.group(4), match.group(3), "input_type_mismatch",
                      input=match.group(1), argument=match.group(5))
    match = _LIST_OF_OP.search(message)
    if match:
        dtypes = [dtype_name(part) for part in match.group(3).split(",") if part.strip()]
        low = [dtype for dtype in dtypes if dtype in LOW_PRECISION]
        other = [dtype for dtype in dtypes if dtype not in LOW_PRECISION]
        if low and other:
            return _mp406(match.group(2), low[0], other[0], "list_types_mismatch", input=match.group(1),
                          dtypes=dtypes)
        return None
    match = _CONVERSION.search(message)
    if match:
        argument = match.group(1)
        if argument and argument.endswith(("Error", "Exception")):  # "ValueError: Tensor conversion ..."
            argument = None
        return _mp406(None, match.group(2), match.group(3), "tensor_conversion", argument=argument)
    match = _SAME_DTYPE.search(message)
    if match:
        return _mp406(None, match.group(1), match.group(2), "same_dtype_check")
    match = _LOOSE_EXPECTED.search(message)
    if match:
        return _mp406(None, match.group(1), match.group(2), "expected_but")
    return None
