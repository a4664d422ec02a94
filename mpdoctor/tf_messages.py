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


MESSAGE_LIMIT = 300
ELLIPSIS = "..."
# A dtype as TensorFlow and Keras messages name it (`dtype=tf.float16`, "a half tensor", `float32`).
_DTYPE_WORD = re.compile(r"\b(?:b?float(?:16|32|64)?|half|double)\b")
_CONTEXT = 40  # characters kept around the dtypes a message names when its middle is left out


# Lines of Keras' wrappers around the real error: "Exception encountered when calling ...", Keras 3's "Could not
# automatically infer the output shape / dtype of 'x' (of type X). Either ... Error encountered:" (the cause is on
# the next line), the arguments the call received.
_WRAPPERS = (
    "Exception encountered",
    "Traceback",
    "File ",
    "in user code:",
    "Call arguments received",
    "Arguments received",
    "\u2022",
)
_WRAPPER_ENDS = ("Error encountered:",)


def first_message_line(message: str) -> str:
    """The line of an exception message that says what went wrong (not Keras' "Exception encountered when
    calling layer ..." wrapper), without terminal colours, shortened to about 300 characters (see `shorten`)."""
    lines = [line.strip() for line in strip_ansi(message).strip().splitlines() if line.strip()]
    for line in lines:  # a graph-mode error quotes the real exception inside "in user code:"
        if re.match(r"\w+(Error|Exception): ", line):
            return shorten(line)
    interesting = [line for line in lines if not line.startswith(_WRAPPERS) and not line.endswith(_WRAPPER_ENDS)]
    return shorten((interesting or lines or [""])[0])


def shorten(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """`text` in at most about `limit` characters, cut between words and marked with "...". What a dtype message
    is about survives the cut: when the dtypes it names come after the limit, the text keeps its start and the
    stretch from the first dtype mention to the first mention of the last distinct dtype ("... dtype=tf.float16 ...
    to TensorSpec(..., dtype=tf.float32 ...")."""
    text = text.strip()
    if len(text) <= limit:
        return text
    spans = _first_mentions(text)
    if not spans or spans[-1][1] <= limit - len(ELLIPSIS):
        return _cut(text, limit - len(ELLIPSIS)) + ELLIPSIS
    start = _word_start(text, max(0, spans[0][0] - _CONTEXT))
    end = _word_end(text, min(len(text), spans[-1][1] + _CONTEXT // 2))
    middle = text[start:end]
    if len(middle) > limit:  # the dtypes far apart: each with a little context
        middle = f" {ELLIPSIS} ".join(
            text[_word_start(text, max(0, a - _CONTEXT)) : _word_end(text, min(len(text), b + _CONTEXT // 2))]
            for a, b in spans
        )
    head = _cut(text, max(0, limit - len(middle) - 2 * len(ELLIPSIS) - 2))
    if start <= len(head) and len(middle) <= limit:  # the two parts meet: one cut is enough
        return _cut(text, end) + (ELLIPSIS if end < len(text) else "")
    head = f"{head} {ELLIPSIS} " if head else ELLIPSIS
    return f"{head}{middle}" + (ELLIPSIS if end < len(text) else "")


def _first_mentions(text: str) -> list[tuple[int, int]]:
    """The span of the first mention of each distinct dtype, in order."""
    seen: dict[str, tuple[int, int]] = {}
    for match in _DTYPE_WORD.finditer(text):
        seen.setdefault(dtype_name(match.group(0)), match.span())
    return list(seen.values())


def _cut(text: str, limit: int) -> str:
    """At most `limit` characters, ending at a word boundary (mid-word only for one very long word)."""
    if len(text) <= limit:
        return text
    cut = text[: limit + 1]
    space = cut.rfind(" ")
    cut = cut[:space] if space > limit // 2 else cut[:limit]
    return cut.rstrip(" ,;:")


def _word_start(text: str, index: int) -> int:
    """`index` moved back to the start of its word."""
    while 0 < index < len(text) and not text[index - 1].isspace():
        index -= 1
    return index


def _word_end(text: str, index: int) -> int:
    """`index` moved forward to the end of its word."""
    while index < len(text) and not text[index].isspace():
        index += 1
    return index


_PHASES = {
    "import": "importing the file",
    "build": "building the model",
    "call": "calling the model on a sample batch",
    "main": "running the file as `__main__`",
    "internal": "tracing the file",
}


def exception_summary(type_name: str, message: str, phase: str) -> str:
    """One line: what raised, and the cause TensorFlow or Keras names ("building the model raised TypeError: Input
    'y' of 'Mul' Op has type float32 that does not match type float16 of argument 'x'.")."""
    return f"{_PHASES.get(phase, 'tracing the file')} raised {type_name or 'an exception'}: {cause(type_name, message)}"


def cause(type_name: str, message: str) -> str:
    """What an exception says went wrong (`first_message_line`), without the exception's type that a graph-mode
    error repeats ("TypeError: Input 'y' of 'Mul' Op ...")."""
    line = first_message_line(message)
    return line[len(type_name) + 2 :] if type_name and line.startswith(f"{type_name}: ") else line


def capped(items: list[str], shown: int = 2) -> str:
    """`a, b and 4 more`: a list in a message, at most `shown` items named (the full list goes in the notes)."""
    if len(items) <= shown + 1:
        return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + items[-1] if items else ""
    return f"{', '.join(items[:shown])} and {len(items) - shown} more"
