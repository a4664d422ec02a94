"""Dataclasses to JSON and back, checked against their type annotations.

The facts the trace child writes are untrusted input for the parent (the child runs user code): `from_json` checks
every value against the declared type (str, int, float, bool, `X | None`, list, tuple, dict[str, X], nested
dataclasses, enumerations by value, `Any` for opaque values) and raises `SchemaError` naming the path of the first
bad value, never a TypeError, AttributeError or RecursionError.

Field metadata: `json` (the key, when it is not the field name: "class"), `not_json` (in-memory only, e.g. the ast
node the static pass attaches). A field whose value is `ABSENT` is left out of the JSON (keys that only some records
have); a missing key reads back as the field's default.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

MAX_DEPTH = 64  # nesting of `Any` values (a forged record cannot exhaust the stack)
MAX_INT = 2**63  # what the child can measure (counts, sizes, lines): a bigger integer is forged

_T = TypeVar("_T")
# A converter checks one JSON value (untrusted) at a path and returns it as the annotation's Python value.
_Converter = Callable[[object, str], Any]
_Field = tuple[str, str, Any, Any]  # name, JSON key, annotation, default or MISSING


class SchemaError(ValueError):
    """A JSON value that does not fit the schema: `path` says where."""


class _Absent:
    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()  # Any: the default of fields of every type


def key(name: str) -> dict[str, str]:
    """Field metadata: the JSON key of a field whose Python name differs (`class_name` -> "class")."""
    return {"json": name}


NOT_JSON = {"not_json": True}


def to_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for name, json_key, _, _ in _fields(type(value)):
            item = getattr(value, name)
            if item is not ABSENT:
                out[json_key] = to_json(item)
        return out
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value


def from_json(cls: type[_T], data: Any, path: str = "$") -> _T:
    decoded: _T = _converter(cls)(data, path)
    return decoded


# -------------------------------------------------------------------------------------------- internals

_FIELDS: dict[type[DataclassInstance], list[_Field]] = {}
_CONVERTERS: dict[Any, _Converter] = {}


def _fields(cls: type[DataclassInstance]) -> list[_Field]:
    """(name, JSON key, type, default or MISSING) of the JSON fields of a dataclass."""
    found = _FIELDS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = []
        for f in dataclasses.fields(cls):
            if f.metadata.get("not_json"):
                continue
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory
            else:
                default = dataclasses.MISSING
            found.append((f.name, f.metadata.get("json", f.name), hints[f.name], default))
        _FIELDS[cls] = found
    return found


def _fail(path: str, expected: str, value: Any) -> typing.NoReturn:
    shown = type(value).__name__ if not isinstance(value, (str, int, float, bool, type(None))) else repr(value)[:60]
    raise SchemaError(f"{path}: expected {expected}, got {shown}")


def _converter(tp: Any) -> _Converter:
    found = _CONVERTERS.get(tp)
    if found is None:
        found = _CONVERTERS[tp] = _make_converter(tp)
    return found


def _make_converter(tp: Any) -> _Converter:
    """The converter of one annotation: a scalar checker, a dataclass, a union, a list/tuple or a dict of them."""
    if tp is Any:
        return _any
    scalar = _SCALARS.get(tp)
    if scalar is not None:
        return scalar
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_converter(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_converter(tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return _union_converter(args)
    if origin in (list, tuple):
        return _sequence_converter(args[0], origin)
    if origin is dict:
        return _mapping_converter(args[1])
    raise TypeError(f"no JSON converter for {tp!r}")


def _enum_converter(cls: type[enum.Enum]) -> _Converter:
    """An enumeration by its value (Severity "error")."""
    values = {member.value: member for member in cls}

    def member(value: object, path: str) -> enum.Enum:
        if type(value) not in (str, int) or value not in values:
            _fail(path, f"one of {sorted(map(str, values))}", value)
        return values[value]

    return member


def _null(value: object, path: str) -> None:
    if value is not None:
        _fail(path, "null", value)
    return None


def _exactly(tp: type) -> _Converter:
    """str and bool: that type itself (a bool is not an int here, an int not a bool)."""

    def simple(value: object, path: str) -> object:
        if type(value) is not tp:
            _fail(path, tp.__name__, value)
        return value

    return simple


def _integer(value: object, path: str) -> int:
    if type(value) is not int or not -MAX_INT <= value <= MAX_INT:
        _fail(path, "a 64-bit integer", value)
    return value


def _number(value: object, path: str) -> float:
    if type(value) not in (int, float) or (type(value) is int and not -MAX_INT <= value <= MAX_INT):
        _fail(path, "a number", value)
    return value  # type: ignore[return-value]  # an int or a float: `type() in` (speed-tuned) does not narrow


_SCALARS: dict[Any, _Converter] = {
    type(None): _null,
    str: _exactly(str),
    bool: _exactly(bool),
    int: _integer,
    float: _number,
}


def _union_converter(args: tuple[Any, ...]) -> _Converter:
    """The first option that accepts the value (None first when the union allows it)."""
    options = [_converter(a) for a in args]
    names = " or ".join(getattr(a, "__name__", str(a)) for a in args)
    others = [_converter(a) for a in args if a is not type(None)]

    def union(value: object, path: str) -> Any:
        if value is None and type(None) in args:
            return None
        if len(others) == 1:  # `X | None` and not None: X's own error, which says where inside the value
            return others[0](value, path)
        for option in options:
            try:
                return option(value, path)
            except SchemaError:
                continue
        _fail(path, names, value)

    return union


def _sequence_converter(item_type: Any, origin: type) -> _Converter:
    """A JSON list, as a list or a tuple (`origin`)."""
    item = _converter(item_type)

    def sequence(value: object, path: str) -> list[Any] | tuple[Any, ...]:
        if not isinstance(value, list):
            _fail(path, "a list", value)
        items = [item(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)

    return sequence


def _mapping_converter(value_type: Any) -> _Converter:
    item = _converter(value_type)

    def mapping(value: object, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            _fail(path, "an object", value)
        return {k: item(v, f"{path}.{k}") for k, v in value.items()}

    return mapping


def _dataclass_converter(cls: type[DataclassInstance]) -> _Converter:
    def convert(value: object, path: str) -> DataclassInstance:
        if len(path) > 40 * MAX_DEPTH and path.count(".") + path.count("[") > MAX_DEPTH:
            raise SchemaError(f"{path[:200]}...: nested more than {MAX_DEPTH} levels")
        if not isinstance(value, dict):
            _fail(path, f"an object ({cls.__name__})", value)
        kwargs: dict[str, Any] = {}
        for name, json_key, tp, default in _fields(cls):
            if json_key in value:
                kwargs[name] = _converter(tp)(value[json_key], f"{path}.{json_key}")
            elif default is dataclasses.MISSING:
                raise SchemaError(f"{path}: missing key {json_key!r} ({cls.__name__})")
        return cls(**kwargs)

    return convert


def _any(value: object, path: str, depth: int = 0) -> Any:
    """A JSON value of any shape, bounded in depth."""
    if depth > MAX_DEPTH:
        raise SchemaError(f"{path}: nested more than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        return {str(k): _any(v, path, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_any(v, path, depth + 1) for v in value]
    if type(value) is int and not -MAX_INT <= value <= MAX_INT:
        _fail(path, "a 64-bit integer", value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    _fail(path, "a JSON value", value)
