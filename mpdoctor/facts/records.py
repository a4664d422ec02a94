"""The records the static pass shares with the trace (mpdoctor.facts.schema, which re-exports them): a place in a
file, a policy change, a layer construction. Apart from the rest of the schema so that a static run need not
create the trace's few dozen record classes (25 ms of its start-up, measured with -X importtime)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from mpdoctor.facts import codec
from mpdoctor.facts.codec import ABSENT, NOT_JSON, key

_Record = TypeVar("_Record", bound="FactsRecord")

FAILED_BUILD = "the model failed to build"  # why a model has no numerics and no plan (ModelRecord.failed_build)


class FactsRecord:
    """JSON conversion for every record type."""

    def to_json(self) -> dict[str, Any]:
        encoded: dict[str, Any] = codec.to_json(self)
        return encoded

    @classmethod
    def from_json(cls: type[_Record], data: Any, path: str = "$") -> _Record:
        decoded: _Record = codec.from_json(cls, data, path)
        return decoded


@dataclass
class SourceRef(FactsRecord):
    """A place in a source file the trace saw (a frame of the user's code)."""

    file: str | None = None
    line: int | None = None
    cell: int = ABSENT  # notebooks (in reports): `line` is then a line of this cell


# ----------------------------------------------------------------------------------------- policies, layers


@dataclass
class PolicyEvent(FactsRecord):
    """A call that sets the global dtype policy. `policy` None: a value that cannot be read (static pass)."""

    policy: str | None
    api: str = ""
    location: SourceRef | None = None
    layers_before: int | None = None  # trace: layers created before the call
    node: Any = field(default=None, compare=False, repr=False, metadata=NOT_JSON)  # static: the ast.Call
    scope: Any = field(default=None, compare=False, repr=False, metadata=NOT_JSON)  # static: enclosing function


@dataclass(eq=False)
class LayerRecord(FactsRecord):
    """A layer or model construction. The trace fills the dtypes it observed; the static pass knows the class as the
    file spells it (`module` is the canonical module, "keras.layers", or None for a class of the file itself) and
    attaches the constructor call as `node`."""

    class_name: str = field(default="", metadata=key("class"))
    module: str | None = None
    name: str | None = None
    flavour: str | None = None
    policy: str | None = None
    compute_dtype: str | None = None
    variable_dtype: str | None = None
    autocast: bool = True
    explicit_dtype: str | None = None
    created_at: SourceRef | None = None
    is_model: bool = False
    node: Any = field(default=None, repr=False, metadata=NOT_JSON)

    @property
    def kind(self) -> str:
        return self.class_name

    @property
    def qualname(self) -> str:
        """`keras.layers.Dense`, `hub.KerasLayer`, or the local class name."""
        return f"{self.module}.{self.class_name}" if self.module else self.class_name

    @property
    def custom(self) -> bool:
        """A layer class defined in the checked file (static pass)."""
        return self.module is None

    @property
    def label(self) -> str:
        """How messages name the layer: `hub.KerasLayer` (a plain `KerasLayer` says little), else its class."""
        return "hub.KerasLayer" if self.qualname == "hub.KerasLayer" else self.kind


def source_refs(record: object) -> list[SourceRef]:
    """Every SourceRef inside a record (a trace summary, facts), for relocating them."""
    found = []
    stack: list[Any] = [record]
    while stack:
        value = stack.pop()
        if isinstance(value, SourceRef):
            found.append(value)
        elif isinstance(value, FactsRecord):
            record_fields = fields(value)  # type: ignore[arg-type]  # every FactsRecord is a dataclass
            stack += [getattr(value, f.name) for f in record_fields if not f.metadata.get("not_json")]
        elif isinstance(value, (list, tuple)):
            stack += value
        elif isinstance(value, dict):
            stack += value.values()
    return found
