"""Reading TensorFlow and Keras error messages: colours stripped, dtypes by their tf.DType names, which layer
raised, the line that says what went wrong. The rules' own patterns (`registry.exception_pattern`) build on these;
every message they read was reproduced on TF 2.21 / Keras 3.15 / tf_keras 2.21 and is test data in
tests/test_trace_exceptions.py.

Pure string matching: no TensorFlow import (it runs in the parent, on the facts' exception records).
"""

from __future__ import annotations

import re

from mpdoctor.facts.dtypes import FLOATS, LOW_PRECISION, canonical_dtype_text

ANSI = re.compile(r"\x1b\[[0-9;]*m")
DTYPE = r"(?:tf\.)?[A-Za-z][A-Za-z0-9_]*"  # a dtype as messages spell it: float16, half, tf.float32
# "Node ... cannot compute X as input #i(zero-based) was expected to be a float tensor but is a half tensor": a
# SavedModel function's input (MP201) when X is a loaded function, an op's input inside a layer (MP406) otherwise.
CANNOT_COMPUTE = re.compile(
    rf"cannot compute (\S+) as input #(\d+)\(zero-based\) was expected to be an? "
    rf"({DTYPE}) tensor but is an? ({DTYPE}) tensor"
)
FUNCTION_OP = re.compile(
    r"^(?:__inference_|__forward_|__backward_|StatefulPartitionedCall|PartitionedCall)"
    r"|signature_wrapper"
)
_LAYER_TF_KERAS = re.compile(r"Exception encountered when calling layer [\"']([^\"']+)[\"'] \(type (\w+)\)")
_LAYER_KERAS3 = re.compile(r"Exception encountered when calling (\w+)\.call\(\)")


def strip_ansi(message: str) -> str:
    return ANSI.sub("", message)


def dtype_name(text: str) -> str:
    """'half' / 'tf.float16' / 'float16' -> 'float16'; 'float' -> 'float32'."""
    return canonical_dtype_text(text)


def is_precision_mismatch(received: str, accepted) -> bool:
    """Whether feeding `received` where `accepted` dtypes are expected is a float16/bfloat16 problem (not, say, a
    float32 tensor fed to an int32 function)."""
    accepted = set(accepted)
    if not accepted or received in accepted:
        return False
    involved = {received} | accepted
    return bool(involved & set(LOW_PRECISION)) and received in FLOATS and bool(accepted & set(FLOATS))


def layer_context(message: str) -> dict:
    """The layer a Keras message says raised: {"layer", "layer_class"} (Keras 3 names only the class)."""
    match = _LAYER_TF_KERAS.search(message)
    if match:
        return {"layer": match.group(1), "layer_class": match.group(2)}
    match = _LAYER_KERAS3.search(message)
    if match:
        return {"layer": None, "layer_class": match.group(1)}
    return {}


def first_message_line(message: str) -> str:
    """The line of an exception message that says what went wrong (not Keras' "Exception encountered when
    calling layer ..." wrapper), at most 300 characters."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    for line in lines:  # a graph-mode error quotes the real exception inside "in user code:"
        if re.match(r"\w+(Error|Exception): ", line):
            return line[:300]
    interesting = [
        line
        for line in lines
        if not line.startswith(
            ("Exception encountered", "Traceback", "File ", "in user code:", "Call arguments received")
        )
    ]
    return (interesting or lines or [""])[0][:300]
