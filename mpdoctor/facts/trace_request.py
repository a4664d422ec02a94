"""What the parent asks of the trace child: the request it writes as JSON next to the child's result
(mpdoctor.trace.runner) and the child reads back (mpdoctor.trace.child.main), and its parts that the engine's
TraceOptions carry: the numerics' options, `mpdoctor plan`'s request, the training step a fix is verified on."""

from __future__ import annotations

from dataclasses import dataclass, field

from mpdoctor.facts.records import FactsRecord

PLAN_RTOL = 0.01  # `mpdoctor plan`: the tolerance of a layer's output against float32 without --rtol


@dataclass
class NumericsRequest(FactsRecord):
    """float16 vs float32 layer by layer on a sample batch (mpdoctor.config.NumericsConfig.request)."""

    enabled: bool = True
    threshold: float | None = None  # MP405's relative error, recorded with the numerics
    batch_size: int = 2
    seed: int = 0
    range: list[float] = field(default_factory=lambda: [0.0, 1.0])  # float inputs: uniform in [low, high)
    sample: str | None = None  # --sample FILE.npz instead of a generated batch


@dataclass
class PlanRequest(FactsRecord):
    """`mpdoctor plan` (mpdoctor/plan.py): the policy planned for (None: the file's, else mixed_float16), the
    tolerance, and whether a plan applied to the file is being verified."""

    policy: str | None = None
    rtol: float = PLAN_RTOL
    verify: bool = False


@dataclass
class StepCheckRequest(FactsRecord):
    """--fix verifying a training fix: the training step of the module to run against float32 (mpdoctor.fix.verify)."""

    function: str = ""


@dataclass
class TraceRequest(FactsRecord):
    file: str = ""  # absolute
    entry: str | None = None  # --entry
    notebook: bool = False  # the source is a notebook's cells
    numerics: NumericsRequest | None = None  # None: the defaults
    scratch: str | None = None  # a directory of the run's own
    source_file: str | None = None  # the text to run as if it were `file` (a candidate fix, a notebook's cells)
    checkpoints: list[str] = field(default_factory=list)  # --checkpoint, absolute
    policy: str | None = None  # the global policy set before the file is imported
    module: str | None = None  # the dotted name to import `file` by (inside a package), None: by its path
    search_path: list[str] = field(default_factory=list)  # the project's roots, put on sys.path before the import
    root: str | None = None  # the project root (mpdoctor.project.layout), None outside a project
    own_modules: list[str] = field(default_factory=list)  # the project's own top-level names: never stood in for
    stub_missing: bool = False  # --stub-missing: stand-ins for missing non-ML modules (trace/child/stand_ins.py)
    plan: PlanRequest | None = None  # None for `check`
    step_check: StepCheckRequest | None = None
    crash_log: str | None = None  # where the child's faulthandler writes the stack of a fatal signal (a native crash)
    # The file's own training steps the static pass names (mpdoctor.static.training_steps): MP504 judges the
    # gradients the step of a model produces, with the step's own loss.
    training_steps: list[str] = field(default_factory=list)
