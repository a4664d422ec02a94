"""The records of the artifact readers (mpdoctor.artifacts): what a SavedModel's signatures accept, what a
checkpoint holds, its float16/bfloat16 range audit and a conversion's result.

The readers return them and `mpdoctor inspect` / `convert-checkpoint` print them (their JSON is `to_json()`, the
fields in the order of the keys); the SavedModel and audit records also reach the rules inside the trace's facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mpdoctor.facts.codec import ABSENT
from mpdoctor.facts.dtypes import LOW_PRECISION
from mpdoctor.facts.records import FactsRecord

# --------------------------------------------------------------------------------------------- SavedModels


@dataclass
class TensorInfo(FactsRecord):
    name: str | None = None
    dtype: str | None = None
    shape: list[int | None] | None = None
    value: Any = ABSENT  # a non-tensor argument (`training=True`)
    type_spec: str | None = ABSENT  # composite tensors ("RaggedTensorSpec")
    spec_name: str | None = ABSENT  # a TensorSpec name that differs from the argument name


@dataclass
class SignatureInfo(FactsRecord):
    name: str = ""
    method_name: str | None = None
    inputs: list[TensorInfo] = field(default_factory=list)
    outputs: list[TensorInfo] = field(default_factory=list)


@dataclass
class FunctionInfo(FactsRecord):
    name: str = ""
    concrete_function: str | None = None
    inputs: list[TensorInfo] = field(default_factory=list)


@dataclass
class SavedModelError(FactsRecord):
    kind: str = ""  # missing | offline | corrupt | not_savedmodel | internal
    message: str = ""


@dataclass
class SavedModelInfo(FactsRecord):
    """What mpdoctor.artifacts.savedmodel.read_savedmodel reads from disk (schema in its docstring)."""

    handle: str | None = None
    path: str | None = None
    error: SavedModelError | None = None
    tags: list[str] = field(default_factory=list)
    signatures: list[SignatureInfo] = field(default_factory=list)
    functions: list[FunctionInfo] = field(default_factory=list)
    accepted_input_dtypes: list[str] = field(default_factory=list)
    accepted_input_dtypes_by_endpoint: dict[str, list[str]] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------- checkpoints


@dataclass
class CheckpointVariable(FactsRecord):
    """One variable of a checkpoint listing (mpdoctor.artifacts.sources.read_checkpoint)."""

    key: str = ""
    dtype: str = ""
    shape: list[int] = field(default_factory=list)
    object_path: str | None = None  # TF2 object-based checkpoints: the path in the object graph
    size_bytes: int | None = None  # None: a dtype without a fixed size (strings)
    name: str = ABSENT  # Keras 2 .h5: the Keras weight name ("dense/kernel:0")


@dataclass
class CheckpointListing(FactsRecord):
    """Every variable of a checkpoint or weights file, from its index or metadata (no tensor read)."""

    path: str = ""  # as given
    format: str = ""  # tf2-object | tf1-name | keras2-h5 | keras3-weights-h5 | keras3-archive
    description: str = ""
    location: str = ""  # the checkpoint prefix or the file
    files: list[str] = field(default_factory=list)
    variables: list[CheckpointVariable] = field(default_factory=list)
    dtypes: dict[str, int] = field(default_factory=dict)  # dtype -> variables, sorted by dtype
    total_bytes: int = 0
    mirrored: int = 0  # Keras export `_all_variables/*` entries that repeat `variables/*`, not listed again


@dataclass
class AuditRow(FactsRecord):
    """One variable of a range audit (mpdoctor.artifacts.range_audit.audit_checkpoint)."""

    key: str = ""
    dtype: str | None = None
    shape: list[int] | None = None
    object_path: str | None = None
    values: int = 0
    max_abs: float = 0.0
    overflow: int = 0
    overflow_fraction: float = 0.0
    flushed: int = 0
    flushed_fraction: float = 0.0
    subnormal: int = 0
    subnormal_fraction: float = 0.0
    nonfinite: int = 0
    zeros: int = 0
    max_relative_error: float = ABSENT  # bfloat16 targets
    mean_relative_error: float = ABSENT
    status: str = "ok"  # ok | overflow | underflow | nonfinite
    # Trace: the innermost layer that owns the variable the value was restored into, and the dtype the value is used
    # in there (its compute dtype, or the variable's own when that is float16). ABSENT when it cannot be told.
    layer: str | None = ABSENT
    compute_dtype: str | None = ABSENT

    @property
    def used_in_low_precision(self) -> bool:
        """Whether the value meets float16/bfloat16 (unknown owner: assumed, as the run computes in float16)."""
        return self.compute_dtype is ABSENT or self.compute_dtype is None or self.compute_dtype in LOW_PRECISION


@dataclass
class CheckpointAudit(FactsRecord):
    """A range audit (audit_checkpoint, audit_arrays; a conversion's audit of what it cast, without the two
    figures of its own reading: `bytes_read` and `seconds` are ABSENT there)."""

    path: str = ""
    format: str = ""
    target_dtype: str = "float16"
    underflow_threshold: float = 0.01
    variables: list[AuditRow] = field(default_factory=list)
    skipped: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    summary: dict[str, float] = field(default_factory=dict)
    safe: bool = True
    verdict: str = ""


@dataclass
class Conversion(FactsRecord):
    """What convert_checkpoint wrote (the fields in the order of the JSON: what was written, then what was asked)."""

    files: list[str] = field(default_factory=list)
    bytes_in: int = 0
    bytes_out: int = 0
    copied: int = 0  # entries copied untouched
    audit: CheckpointAudit = field(default_factory=CheckpointAudit)  # of the cast entries
    path: str = ""
    output: str = ""
    format: str = ""
    target_dtype: str = ""
    cast: list[str] = field(default_factory=list)  # the keys cast
    seconds: float = 0.0
    verified: bool = True
    overwrote: bool = False
    notes: list[str] = field(default_factory=list)
    clamped: int = 0  # values clamped to the target's max (overflow="saturate")
    became_inf: dict[str, int] = field(default_factory=dict)  # key -> finite values the cast made inf
