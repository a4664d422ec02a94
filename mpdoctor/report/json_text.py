"""`json.dump(value, stream, indent=2)`, the same text, several times faster.

The standard library encodes with its C encoder only without `indent`; with it, every value passes through three
nested Python generators and `json.dump` writes each piece to the stream separately (a million writes). On a
report with thousands of findings that was a quarter of a static run (bench/static.py, "directory of 2,000
files"). Strings still go through the C quoting function; tests/test_json_text.py compares the output with the
standard library's.
"""

from __future__ import annotations

from json.encoder import encode_basestring_ascii as quoted  # a str as JSON text (ensure_ascii)
from typing import TextIO

_INFINITY = float("inf")
_FLUSH_AT = 8192  # pieces held before a write_indented writes them


class Encoded(str):
    """JSON text already encoded for its place in the document (indented for its depth): written as it is."""


def dumps_indented(value: object, depth: int = 0) -> str:
    """What `json.dumps(value, indent=2)` returns (ensure_ascii, NaN allowed, keys in insertion order); `depth`:
    as it is written at that depth of a document (its inner lines indented `depth` levels more)."""
    parts: list[str] = []
    _encode(value, parts, "\n" + "  " * depth)
    return "".join(parts)


def write_indented(value: object, stream: TextIO) -> None:
    """`json.dump(value, stream, indent=2)`: the same text, written a few thousand pieces at a time (the whole
    text of a report with thousands of findings at once would double the run's peak memory)."""
    parts = _Flushing(stream)
    _encode(value, parts, "\n")
    parts.flush()


class _Flushing(list[str]):
    """The pieces not written yet; every list and object element checks whether it is time to write them."""

    def __init__(self, stream: TextIO):
        super().__init__()
        self.stream = stream

    def flush(self) -> None:
        self.stream.write("".join(self))
        self.clear()


def _encode(value: object, parts: list[str], newline: str) -> None:
    # Dispatch on type() identity, quicker than isinstance; mypy does not narrow on it, hence the ignores.
    kind = type(value)
    if kind is str:
        parts.append(quoted(value))  # type: ignore[arg-type]
    elif value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif kind is int:
        parts.append(int.__repr__(value))
    elif kind is dict:
        _encode_dict(value, parts, newline)  # type: ignore[arg-type]
    elif kind is list or kind is tuple:
        _encode_list(value, parts, newline)  # type: ignore[arg-type]
    elif kind is Encoded:
        parts.append(value)  # type: ignore[arg-type]
    elif isinstance(value, str):  # subclasses, in the standard library's order of checks
        parts.append(quoted(value))
    elif isinstance(value, int):
        parts.append(int.__repr__(value))
    elif isinstance(value, float):
        parts.append(_float(value))
    elif isinstance(value, (list, tuple)):
        _encode_list(value, parts, newline)
    elif isinstance(value, dict):
        _encode_dict(value, parts, newline)
    else:
        raise TypeError(f"Object of type {kind.__name__} is not JSON serializable")


def _encode_list(value: list[object] | tuple[object, ...], parts: list[str], newline: str) -> None:
    if not value:
        parts.append("[]")
        return
    inner = newline + "  "
    separator = "[" + inner
    for item in value:
        if type(item) is str:  # the common element, written with its separator in one piece
            parts.append(separator + quoted(item))
        else:
            parts.append(separator)
            _encode(item, parts, inner)
        separator = "," + inner
        if len(parts) > _FLUSH_AT and isinstance(parts, _Flushing):
            parts.flush()
    parts.append(newline + "]")


def _encode_dict(value: dict[object, object], parts: list[str], newline: str) -> None:
    if not value:
        parts.append("{}")
        return
    inner = newline + "  "
    head = "{" + inner
    separator = "," + inner
    for key, item in value.items():
        head += quoted(key) if type(key) is str else _key(key)
        kind = type(item)  # strings, None and ints (most values) written with their key in one piece
        if kind is str:
            parts.append(head + ": " + quoted(item))  # type: ignore[arg-type]
        elif item is None:
            parts.append(head + ": null")
        elif kind is int:
            parts.append(head + ": " + int.__repr__(item))
        else:
            parts.append(head + ": ")
            _encode(item, parts, inner)
        head = separator
    parts.append(newline + "}")


def _key(key: object) -> str:
    """Keys as the standard library converts them: strings, then floats, booleans, None and ints as text."""
    if isinstance(key, str):
        return quoted(key)
    if isinstance(key, float):
        return quoted(_float(key))
    if key is True:
        return '"true"'
    if key is False:
        return '"false"'
    if key is None:
        return '"null"'
    if isinstance(key, int):
        return quoted(int.__repr__(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value == _INFINITY:
        return "Infinity"
    if value == -_INFINITY:
        return "-Infinity"
    return float.__repr__(value)
