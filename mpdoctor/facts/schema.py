"""The typed schema of what the trace pass knows (version 1): what the child writes as JSON, what the rules, the
engine and the renderers read. `Facts.from_json` validates the child's output (untrusted: it ran user code);
`new_facts()` is the one empty record. The static pass produces the same `PolicyEvent` and `LayerRecord` types,
with the syntax node that made them attached (`node`, never serialised): they live in mpdoctor.facts.records,
which a static run imports without the rest.

Field names follow the JSON keys (`class_name` is "class"). The records of the artifact readers (SavedModel
signatures, checkpoint range audits) are in mpdoctor.facts.artifacts: they reach the rules through these facts.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from mpdoctor.facts import codec
from mpdoctor.facts.artifacts import CheckpointAudit, SavedModelInfo
from mpdoctor.facts.codec import ABSENT, NOT_JSON, key
from mpdoctor.facts.dtypes import GRADIENT_FLUSH_THRESHOLD as GRADIENT_FLUSH_THRESHOLD
from mpdoctor.facts.records import FAILED_BUILD as FAILED_BUILD
from mpdoctor.facts.records import FactsRecord, SourceRef
from mpdoctor.facts.records import LayerRecord as LayerRecord  # the static pass's records, for the trace too
from mpdoctor.facts.records import PolicyEvent as PolicyEvent
from mpdoctor.facts.records import source_refs as source_refs

if TYPE_CHECKING:
    from collections.abc import Iterator

FACTS_VERSION = 1


@dataclass
class ErrorRecord(FactsRecord):
    """An exception a recorded call raised."""

    type: str = ""
    message: str = ""


# ------------------------------------------------------------------------------------------------ environment


@dataclass
class Gpu(FactsRecord):
    name: str | None = None
    compute_capability: list[int] | None = None


@dataclass
class Environment(FactsRecord):
    cpu_bf16: bool = False
    tensorflow: str | None = None
    keras: str | None = None
    tf_keras: str | None = None
    hub: str | None = None
    legacy_keras: bool = False  # tf.keras is tf_keras (TF >= 2.15 with TF_USE_LEGACY_KERAS)
    keras_major: int | None = None  # of the Keras behind tf.keras (2 on TF <= 2.15 unless Keras 3 was installed)
    gpus: list[Gpu] = field(default_factory=list)
    global_policy: str | None = None  # in force when the run ended
    # Keras 3's backend when not TensorFlow ("jax", "torch": TensorFlow was not imported); ABSENT on TensorFlow
    backend: str = ABSENT


# --------------------------------------------------------------------------------------------- SavedModels


@dataclass
class SavedModelLoad(FactsRecord):
    """A SavedModel loaded by `hub.KerasLayer`, `keras.layers.TFSMLayer`, `hub.load` or `tf.saved_model.load`."""

    api: str = ""
    handle: str | None = None
    layer_uid: str | None = None
    location: SourceRef | None = None
    savedmodel: SavedModelInfo | None = None
    call_endpoint: str | None = None
    error: ErrorRecord | None = None  # the load itself raised


# --------------------------------------------------------------------------------------------- checkpoints


@dataclass
class Unmatched(FactsRecord):
    """What a completed restore left unmatched (MP304)."""

    kind: str = "object"  # object (TF2, object graph) | name (TF1 Saver) | values (hand-written: read and assigned)
    expect_partial: bool = False
    unused_values: int = 0
    unused_value_names: list[str] = field(default_factory=list)
    variables_without_value: int = 0
    variable_names: list[str] = field(default_factory=list)


@dataclass
class Restore(FactsRecord):
    """A checkpoint restore (`Checkpoint.restore/read`, `Saver.restore`, `load_weights`, `load_model`, or a
    `--checkpoint` of the command line, api "--checkpoint")."""

    api: str = ""
    path: str | None = None
    location: SourceRef | None = None
    error: ErrorRecord | None = None
    receiver_created_at: SourceRef | None = None  # where the Saver / Checkpoint object was created
    unmatched: Unmatched | None = None
    unmatched_error: str | None = None
    audit: CheckpointAudit | None = None
    audit_error: str | None = None

    @property
    def anchor(self) -> SourceRef | None:
        """Where a finding about the restore belongs: where its Saver / Checkpoint was created, else the call."""
        return self.receiver_created_at or self.location

    @property
    def call_text(self) -> str:
        if self.api == "--checkpoint":
            return f"--checkpoint {self.path}"
        return f"{self.api}({self.path!s})"


@dataclass
class Export(FactsRecord):
    """A save or export of a model (`model.save`, `model.export`, `tf.saved_model.save`)."""

    api: str = ""
    path: str | None = None  # where the code asked to write
    written_to: str | None = None  # where the trace really wrote it (its scratch directory)
    location: SourceRef | None = None
    error: ErrorRecord | None = None
    receiver_created_at: SourceRef | None = None
    savedmodel: SavedModelInfo | None = None


# ------------------------------------------------------------------------------------------------ graphs


@dataclass
class GraphNode(FactsRecord):
    """A layer (or op) of a model graph; dtypes observed and predicted (see mpdoctor.trace.child.graph)."""

    id: str
    name: str = ""
    class_name: str = field(default="", metadata=key("class"))
    module: str | None = None
    uid: str | None = None
    kind: str = "builtin"  # input, model, subclassed_model, op, lambda, savedmodel, preprocessing, custom, builtin
    is_model: bool = False
    policy: str | None = None
    compute_dtype: str | None = None
    variable_dtype: str | None = None
    autocast: bool = False
    is_output: bool = False
    is_input: bool = False
    created_at: SourceRef | None = None
    savedmodel_handle: str | None = None
    activation: str | None = None
    explicit_dtype: str | None = None
    input_dtypes: list[str | None] = field(default_factory=list)
    output_dtypes: list[str | None] = field(default_factory=list)
    predicted_input_dtypes: list[str | None] = field(default_factory=list)
    predicted_output_dtypes: list[str | None] = field(default_factory=list)
    parent: str | None = None
    calls: int = 0
    observed: str | None = None  # graph | probe | None


@dataclass
class GraphEdge(FactsRecord):
    source: str
    target: str
    dtype: str | None = None
    shape: list[int | None] | None = None
    arg_index: int = 0
    input_index: int = 0
    output_index: int = 0
    call: int = 0
    arg_name: str = ABSENT


@dataclass
class GraphInput(FactsRecord):
    node: str | None = None
    dtype: str | None = None
    shape: list[int | None] | None = None


@dataclass
class GraphOutput(FactsRecord):
    node: str | None = None
    dtype: str | None = None  # declared: the dtype of the model's symbolic output
    shape: list[int | None] | None = None
    predicted_dtype: str | None = None
    output_index: int | None = None
    # What the model's call on the sample batch returned: it can differ from the declared dtype (a keras-hub causal
    # LM declares float16 logits but its tied reverse embedding returns float32). ABSENT when the call did not run.
    observed_dtype: str | None = ABSENT

    @property
    def observed(self) -> bool:
        return self.observed_dtype is not ABSENT and self.observed_dtype is not None

    @property
    def actual_dtype(self) -> str | None:
        """The dtype the model really returns: observed on the sample call, else the declared one."""
        return self.observed_dtype if self.observed else self.dtype


@dataclass
class Disagreement(FactsRecord):
    node: str = ""
    predicted: list[str | None] = field(default_factory=list)
    observed: list[str | None] = field(default_factory=list)
    reason: str = ABSENT


@dataclass
class ProbeInfo(FactsRecord):
    model: str = ""
    status: str | None = None
    error: ErrorRecord | None = None
    nested: list[ProbeInfo] = ABSENT


@dataclass
class ModelGraph(FactsRecord):
    flavour: str | None = None
    model: str = ""
    model_kind: str = ""
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)
    outputs: list[GraphOutput] = field(default_factory=list)
    inputs: list[GraphInput] = field(default_factory=list)
    mismatches: list[Disagreement] = field(default_factory=list)
    unpredictable: list[Disagreement] = field(default_factory=list)
    probe: ProbeInfo | None = None

    def node(self, node_id: str | None) -> GraphNode | None:
        return next((n for n in self.nodes if n.id == node_id), None)

    def output_nodes(self) -> Iterator[tuple[GraphNode, GraphOutput]]:
        """(node, output) for every model output produced by a node of this graph."""
        nodes: dict[str | None, GraphNode] = {n.id: n for n in self.nodes}  # an output may name no node
        for output in self.outputs:
            node = nodes.get(output.node)
            if node is not None:
                yield node, output


# ---------------------------------------------------------------------------------------------- numerics


@dataclass
class NumericsRow(FactsRecord):
    """One layer's float16 vs float32 statistics on the sample batch."""

    id: str
    name: str = ""
    class_name: str = field(default="", metadata=key("class"))
    finite: bool = True
    finite_reference: bool = True
    max_abs: float | None = None
    max_abs_reference: float | None = None
    relative_error: float | None = None
    empty_reference: bool = ABSENT  # the float32 output has no elements: nothing to judge (a too-small sample)


@dataclass
class FirstNonFinite(FactsRecord):
    id: str
    op: str | None = None
    inputs_finite: bool = True
    line: int | None = ABSENT  # the line of the checked file that ran that op (its innermost frame there)


@dataclass
class LineOp(FactsRecord):
    line: int
    op: str


@dataclass
class LineConstant(FactsRecord):
    line: int
    op: str
    value: str  # "inf", "-inf" or "0"


@dataclass
class UserLayerScan(FactsRecord):
    """The traced float16 graph of a user layer: what its source lines compute (trace forms of MP403/MP407)."""

    id: str
    class_name: str = field(default="", metadata=key("class"))
    source_lines: list[int] | None = None
    status: str = "ok"
    float16_lines: list[int] = field(default_factory=list)
    constants: list[LineConstant] = field(default_factory=list)
    ops: list[LineOp] = field(default_factory=list)


@dataclass
class LossRecord(FactsRecord):
    name: str = ""
    predictions: list[str] = field(default_factory=list)
    dtype: str | None = None
    error: str | None = None


@dataclass
class NumericsTable(FactsRecord):
    """The per-layer float16 vs float32 table of one model: what a report keeps of its numerics."""

    dtype: str | None = None
    reference_dtype: str = "float32"
    batch_size: int = 2
    seed: int = 0
    skipped: str | None = None
    layers: list[NumericsRow] = field(default_factory=list)


@dataclass
class NumericsRecord(NumericsTable):
    """The numerics of one model: the table, and what the rules read besides it."""

    first_non_finite: FirstNonFinite | None = None
    user_layers: list[UserLayerScan] = field(default_factory=list)
    loss: LossRecord | None = None
    threshold: float | None = None
    open_size: int | None = ABSENT  # the size given to dimensions the model leaves open (None in its input shape)
    open_size_how: str | None = ABSENT  # declared | shape inference | fallback

    def table(self) -> NumericsTable:
        return NumericsTable(**{f.name: getattr(self, f.name) for f in fields(NumericsTable)})


# ---------------------------------------------------------------------------------------------- gradients


@dataclass
class VariableGradient(FactsRecord):
    """One variable's gradient, float32 vs the policy, on one training step of the sample batch."""

    name: str = ""
    layer: str | None = None  # graph node id of the layer holding it
    values: int = 0
    nonzero_reference: int = 0  # nonzero in float32
    flushed: int = 0  # of those: zero under the policy
    nonfinite: int = 0  # non-finite under the policy
    max_abs_reference: float = 0.0


@dataclass
class GradientRecord(FactsRecord):
    """Gradients of one training step (training mode, loss on the sample batch), float32 vs the policy with the loss
    scaling the script uses, after a dynamic scale settles (MP504; mpdoctor/trace/child/training_step.py)."""

    policy: str = ""
    loss: str = ""  # what was differentiated: the compiled loss, or a loss object of the file
    loss_scaling: str = "none"  # none | LossScaleOptimizer (automatic or the script's) with its scale
    optimizer: str = ""  # where the optimizer comes from: "compile()" or the name of the file's module attribute
    loss_scale: float = 1.0
    loss_value: float | None = None  # under the policy
    loss_finite: bool = True
    skipped: str | None = None
    variables: list[VariableGradient] = field(default_factory=list)
    labels: str = ""  # how the step's labels were made (class ids, seeded targets)
    skipped_steps: int = 0  # steps a dynamic loss scale skipped (overflow) before `loss_scale` settled
    inference_layers: list[str] = field(default_factory=list)  # random layers run in inference mode in both steps

    @property
    def nonzero_reference(self) -> int:
        return sum(v.nonzero_reference for v in self.variables)

    @property
    def flushed(self) -> int:
        return sum(v.flushed for v in self.variables)

    @property
    def flushed_share(self) -> float:
        return self.flushed / self.nonzero_reference if self.nonzero_reference else 0.0

    @property
    def underflows(self) -> bool:
        return not self.skipped and self.flushed_share > GRADIENT_FLUSH_THRESHOLD


# ------------------------------------------------------------------------------------------ fix verification


@dataclass
class StepCheckRecord(FactsRecord):
    """A loss-scaling fix verified by training (issue 19): the weight update of one call of the fixed file's
    training step function on the sample batch under its policy, against the same step from the same weights
    with the model computing in float32 and the loss scale at 1 (what the code trains without mixed precision)."""

    function: str = ""
    skipped: str | None = None  # why the step could not be compared (then nothing is claimed either way)
    cosine: float | None = None  # of the two updates, over the model's trainable variables
    norm_ratio: float | None = None  # |fixed update| / |float32 update|
    loss_scale: float = 1.0  # the scale of the low-precision step (the optimizer's, when it scales)
    attempts: int = 0  # calls until the low-precision step moved the weights (dynamic scaling skips overflows)


# ------------------------------------------------------------------------------------------------- plan


@dataclass
class PlanLayer(FactsRecord):
    """A layer the plan keeps in float32 (`mpdoctor plan`), and why."""

    id: str  # graph node id
    name: str = ""
    class_name: str = field(default="", metadata=key("class"))
    reason: str = ""  # output-activation | constant | non-finite | error | gradient (what made it a member)
    detail: str = ""  # what was seen: "softmax output", "-1e9 constant (line 12)", "max relative error 3.2%"
    op: str | None = None  # the op that produced the first inf/NaN, when named
    relative_error: float | None = None  # of the model outputs when this layer alone went back to low precision
    flops: float = 0.0  # estimated multiply-adds of one call on the sample batch
    created_at: SourceRef | None = None
    path: list[str] = field(default_factory=list)  # layer names from the model down (get_layer chain)
    user_code: bool = False  # created in the checked file (fixable by dtype="float32" there)
    created_with: int = 1  # layers that source line created in the run (a loop): a dtype= there moves them all
    constant_line: int | None = None  # reason "constant": the line using the constant (MP403's fix replaces it)


@dataclass
class PlanCheck(FactsRecord):
    """One configuration run on the sample batch: are the model outputs finite and within rtol of float32?"""

    policy: str = ""
    float32_layers: int = 0
    finite: bool = True
    max_relative_error: float | None = None
    passed: bool = False
    gradients: GradientRecord | None = None  # training files: one training step under this configuration


@dataclass
class PlanRecord(FactsRecord):
    """`mpdoctor plan` for one model: the smallest verified set of layers to keep in float32 under `policy`."""

    policy: str = ""
    rtol: float = 0.01
    skipped: str | None = None
    mode: str = "plan"  # plan | verify (the plan applied: the file as it is, checked once)
    candidates: int = 0  # layers computing in low precision under the policy
    layers: list[PlanLayer] = field(default_factory=list)
    initial: PlanCheck | None = None  # nothing kept in float32
    final: PlanCheck | None = None  # the plan applied (its verification)
    bfloat16: PlanCheck | None = None  # the alternative: mixed_bfloat16 with nothing kept in float32
    forward_passes: int = 0  # model runs spent (the float32 reference included)
    naive_passes: int = 0  # what the one-layer-at-a-time sweep needs for the same answer
    total_flops: float = 0.0
    low_precision_flops: float = 0.0  # what still computes in low precision with the plan applied
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    # Training files: what the training step with the plan applied (final.gradients) still needs, e.g. loss scaling
    gradient_advice: str | None = None
    model_location: SourceRef | None = None  # where the model was built (the plan's snippet goes after it)
    flavour: str | None = None  # keras3 | tf_keras | keras2 (the graph's)

    @property
    def low_precision_share(self) -> float | None:
        return self.low_precision_flops / self.total_flops if self.total_flops else None


# ------------------------------------------------------------------------------------------ models, facts


@dataclass
class ExceptionRecord(FactsRecord):
    """An exception of the run: importing the file, building or calling a model, or mpdoctor's own."""

    type: str = ""
    message: str = ""
    phase: str = "internal"  # import | build | call | internal
    location: SourceRef | None = None  # the deepest frame in the user's file
    layer_uid: str | None = None
    traceback: str = ABSENT


# The parent asks a trace child that ran out of time to write what it has, then end (mpdoctor/trace/child/stop.py).
STOP_SIGNAL = signal.SIGUSR1


@dataclass
class TimeoutRecord(FactsRecord):
    """The trace ran out of time and stopped (issue 14 item 7): the facts hold what ran before."""

    phase: str = "import"  # what the child was doing: prepare (importing TensorFlow) | import | build | analysis
    location: SourceRef | None = None  # the line of the user's file that was running (innermost frame)


@dataclass
class EntryRun(FactsRecord):
    """How the trace ran the file beyond importing it (issue 31): as `python file.py` does when importing it built no
    model, from the script's own directory when its data is found from there, with the command-line arguments it
    needed and could not get."""

    as_main: bool = False  # its `if __name__ == "__main__":` blocks ran (importing it built no model)
    cwd: str | None = None  # the directory it ran in, when not the one mpdoctor runs in (the script's own)
    stopped_at_training: int | None = None  # the file's line of the first training call, where the run stopped
    needs_arguments: list[str] = field(default_factory=list)  # required command-line arguments it did not get


@dataclass
class ToolFailure(FactsRecord):
    """mpdoctor's own failure in the trace child: an adapter that does not fit the installed Keras, a hook that
    raised while the file ran, an error of the child's own analysis. Never an exception of the user's code (those
    are ExceptionRecords); the trace's findings are then incomplete, so the parent reports only this."""

    stage: str = "child"  # hooks (installing them: the file did not run) | hook (while the file ran) | child
    reason: str = ""  # "ModuleNotFoundError: No module named 'keras.src.layers.layer'"
    where: str | None = None  # the hook or step that failed ("hook layer __init__", "install keras")
    adapters: dict[str, str] = field(default_factory=dict)  # package -> the adapter installed for it
    traceback: str = ""  # its tail, for --verbose


@dataclass
class ModelRecord(FactsRecord):
    name: str | None = None
    how: str = ""  # how discovery found it
    location: SourceRef | None = None
    compiled: bool = False
    graph: ModelGraph | None = None
    error: ExceptionRecord | None = None
    graph_error: str | None = None
    numerics: NumericsRecord | None = None
    plan: PlanRecord | None = None  # `mpdoctor plan` only
    gradients: GradientRecord | None = None  # training files: float32 vs the policy, one training step (MP504)
    # The run raised while this model was being built (it is not built): its graph is what was added before, and
    # nothing was run on it (the run's exception says why).
    failed_build: bool = ABSENT


@dataclass
class Facts(FactsRecord):
    version: int = FACTS_VERSION
    status: str = "ok"  # ok | exception | timeout (stopped at the timeout: `timeout` says where)
    environment: Environment | None = None
    policy_events: list[PolicyEvent] = field(default_factory=list)
    layers: dict[str, LayerRecord] = field(default_factory=dict)  # by uid, str(id(layer))
    savedmodel_loads: list[SavedModelLoad] = field(default_factory=list)
    restores: list[Restore] = field(default_factory=list)
    exports: list[Export] = field(default_factory=list)
    models: list[ModelRecord] = field(default_factory=list)
    exception: ExceptionRecord | None = None
    layers_created_on_import: int | None = None
    in_process: bool = False  # the Jupyter live path: no hooks saw the model being built
    # Trace: where a redirected save really wrote -> the path as the code gave it. The parent maps every path in
    # the facts back through it (mpdoctor.trace.runner), so messages name the user's `pretrained`, not the scratch
    # directory.
    saved_paths: dict[str, str] = field(default_factory=dict)
    tool_failure: ToolFailure | None = None  # mpdoctor's own failure (the first): the facts are incomplete
    timeout: TimeoutRecord | None = ABSENT  # the trace ran out of time: the facts are what ran before it
    step_check: StepCheckRecord | None = ABSENT  # a fix verified by training (the request asked for it)
    # Absolute paths of what the run read besides the file (local modules, opened files, restored checkpoints,
    # loaded SavedModels): the result cache's dependencies (mpdoctor.trace.child.inputs). ABSENT: not recorded.
    inputs: list[str] = ABSENT
    lookups: Lookups = ABSENT  # what else the run's result depends on, for the result cache; ABSENT: not recorded
    stand_ins: list[str] = field(default_factory=list)  # --stub-missing: the missing modules the run was given
    entry_run: EntryRun | None = ABSENT  # ran as `__main__`, from another directory, lacking arguments; else ABSENT

    def layer(self, uid: str | None) -> LayerRecord | None:
        return self.layers.get(uid) if uid else None

    @property
    def final_policy(self) -> str | None:
        return self.environment.global_policy if self.environment else None

    @property
    def stopped(self) -> bool:
        """The trace ran out of time and stopped the run: these facts are what ran before (`timeout`)."""
        return self.timeout is not None and self.timeout is not ABSENT

    @property
    def keras_major(self) -> int:
        return (self.environment.keras_major if self.environment else None) or 3

    def graphs(self) -> Iterator[tuple[ModelRecord, ModelGraph]]:
        """(model record, graph) for every analysed model that has a graph."""
        for model in self.models:
            if model.graph is not None:
                yield model, model.graph

    def numerics(self) -> Iterator[tuple[ModelRecord, NumericsRecord]]:
        """(model record, numerics record) for every model whose numerics ran."""
        for model in self.models:
            if model.numerics is not None and not model.numerics.skipped:
                yield model, model.numerics


@dataclass
class Lookups(FactsRecord):
    """What a run looked at besides the files it read (Facts.inputs), for the result cache: absolute paths whose
    existence or type it tested (stat), directories it listed, and the environment variables it read before setting
    them (name -> sha256 of the value it saw, None: unset; hashed, so no secret is kept in the cache)."""

    probed: list[str] = field(default_factory=list)
    listed: list[str] = field(default_factory=list)
    environment: dict[str, str | None] = field(default_factory=dict)


def new_facts(**values: Any) -> Facts:
    return Facts(**values)


# -------------------------------------------------------------------------------------- what a report keeps


@dataclass
class ModelSummary(FactsRecord):
    name: str | None = None
    how: str = ""
    graph: ModelGraph | None = None
    numerics: NumericsTable | None = None
    plan: PlanRecord | None = None  # `mpdoctor plan` only
    failed_build: bool = ABSENT  # ModelRecord.failed_build


@dataclass
class CheckpointSummary(FactsRecord):
    api: str = ""
    path: str | None = None
    location: SourceRef | None = None
    audit: CheckpointAudit | None = None
    audit_error: str | None = None


@dataclass
class SavedModelSummary(FactsRecord):
    api: str = ""
    handle: str | None = None
    savedmodel: SavedModelInfo | None = None


@dataclass
class TraceSummary(FactsRecord):
    """What a report keeps of one file's trace: the models' graphs and numerics, the SavedModels read, the range
    audits of restored checkpoints and the environment (JSON `traces[]`, the HTML report)."""

    path: str
    status: str = "ok"  # ok | exception | failed | internal (mpdoctor's own failure: `tool_failure`)
    failure: str | None = None
    environment: Environment | None = None
    tool_failure: ToolFailure | None = ABSENT
    models: list[ModelSummary] = field(default_factory=list)
    checkpoints: list[CheckpointSummary] = field(default_factory=list)
    savedmodels: list[SavedModelSummary] = field(default_factory=list)
    step_check: StepCheckRecord | None = ABSENT  # verifying a training fix: the fixed step against float32
    # The run's exception in one line (tf_messages.exception_summary), with the line of the file it was raised at:
    # why a model is missing (a model that failed to build has no graph to draw and nothing to plan).
    exception: str | None = ABSENT
    exception_line: int | None = ABSENT
    stand_ins: list[str] = ABSENT  # --stub-missing: the missing modules the run was given stand-ins for, if any
    entry_run: EntryRun | None = ABSENT  # how the file was run beyond an import (Facts.entry_run), if it was
    # What the run read besides the file (Facts.inputs), for the result cache; None: unknown. Not in reports.
    inputs: list[str] | None = field(default=None, metadata=NOT_JSON)
    lookups: Lookups | None = field(default=None, metadata=NOT_JSON)  # Facts.lookups; None: unknown

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = codec.to_json(self)
        data["environment"] = data["environment"] or {}
        return data

    @classmethod
    def of(cls, shown: str, facts: Facts | None, failure: str | None, exception: str | None = None) -> TraceSummary:
        """`exception`: the run's exception in one line (the parent's reading of facts.exception)."""
        facts = facts or new_facts()
        if failure is None and facts.tool_failure is not None:
            return cls(
                path=shown,
                status="internal",
                failure=cannot_trace_message(facts.environment, facts.tool_failure),
                environment=facts.environment,
                tool_failure=facts.tool_failure,
            )
        return cls(
            path=shown,
            status="failed" if failure else facts.status,
            failure=failure,
            environment=facts.environment,
            models=[
                ModelSummary(m.name, m.how, m.graph, m.numerics.table() if m.numerics else None, m.plan, m.failed_build)
                for m in facts.models
            ],
            checkpoints=[
                CheckpointSummary(r.api, r.path, r.location, r.audit, r.audit_error)
                for r in facts.restores
                if r.audit is not None or r.audit_error is not None
            ],
            savedmodels=[
                SavedModelSummary(load.api, load.handle, load.savedmodel)
                for load in script_loads(facts.savedmodel_loads)
            ],
            step_check=facts.step_check,
            exception=exception or ABSENT,
            exception_line=(
                facts.exception.location.line
                if facts.exception is not None and facts.exception.location is not None
                else ABSENT
            ),
            stand_ins=list(facts.stand_ins) or ABSENT,
            entry_run=_shown_entry_run(facts.entry_run),
            inputs=None if facts.inputs is ABSENT else list(facts.inputs),
            lookups=None if facts.lookups is ABSENT else facts.lookups,
        )


def _shown_entry_run(run: EntryRun | None) -> EntryRun | None:
    """The record of how the file ran, its directory relative to mpdoctor's working directory when inside it."""
    if not isinstance(run, EntryRun) or run.cwd is None:
        return run
    cwd = os.path.relpath(run.cwd) if run.cwd.startswith(os.getcwd() + os.sep) else run.cwd
    return replace(run, cwd=cwd)


def script_loads(loads: list[SavedModelLoad]) -> list[SavedModelLoad]:
    """The SavedModel loads the script made: hub.KerasLayer calls hub.load, which calls tf.saved_model.load, and the
    hooks record all three at the script's line; only the outermost of the loads at one line is the script's."""
    outermost: dict[tuple[str | None, int | None], int] = {}
    for load in loads:
        if load.location is not None:
            where = (load.location.file, load.location.line)
            outermost[where] = min(outermost.get(where, len(_LOAD_DEPTH)), _load_depth(load))
    return [
        load
        for load in loads
        if load.location is None or _load_depth(load) == outermost[(load.location.file, load.location.line)]
    ]


_LOAD_DEPTH = ("layer", "hub.load", "tf.saved_model.load")


def _load_depth(load: SavedModelLoad) -> int:
    kind = "layer" if load.layer_uid is not None else load.api
    return _LOAD_DEPTH.index(kind) if kind in _LOAD_DEPTH else 0


def cannot_trace_message(environment: Environment | None, failure: ToolFailure) -> str:
    """ "mpdoctor cannot trace on TensorFlow 2.15.1 / Keras 2.15.0: <reason>" """
    env = environment or Environment()
    if env.legacy_keras and env.tf_keras:
        keras = f"tf_keras {env.tf_keras}"
    else:
        keras = f"Keras {env.keras or 'unknown'}"
    return f"mpdoctor cannot trace on TensorFlow {env.tensorflow or 'unknown'} / {keras}: {failure.reason}"
