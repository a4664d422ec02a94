"""`mpdoctor plan` in the trace child: the smallest set of a model's layers to keep in float32 so that its outputs on
the sample batch are finite and within `rtol` of float32 under a low-precision policy, found by bisection and
verified.

Units: the layers that are nodes of the model's graph (nested models are looked through, as the numerics do), each
with its own sublayers (a custom block is kept in float32 as a whole). Only units that compute in float16/bfloat16
under the policy are candidates; the others (explicitly float32, integer layers) stay as they are. A configuration
is a set S of candidates computing in float32, the rest under the policy, switched in place on the built model
(`keras_adapter.set_layer_policy`; the weights are shared: `mixed_*` variables are float32). `check(S)` runs the
model once on the sample batch and passes when every float output is finite and its relative error,
max |y - y32| / max |y32|, is at most rtol against the all-float32 reference.

Search (at most k * ceil(log2 n) + 2k + 4 forward passes for k members among n candidates, the reference, its
repeatability check and the bfloat16 alternative included; one more for a model that draws random numbers):
0. The float32 reference, every pass from the same seed; a pass from another seed tells whether the model draws
   random numbers in inference mode, and if it does, a second pass from the first seed must repeat the reference
   (else no plan: the differences would be noise, not float16).
1. S starts with what the rules know must compute in float32 whatever the sample shows: saturating output
   activations (MP401) and user layers holding constants that are inf/0 in float16 (MP403).
2. While check(S) fails: with the candidates in topological order (the order their calls return), P(j) = S plus
   every candidate from j on in float32. P(lo) passes (at first lo = 0: everything in float32 is the reference) and
   P(n) = check(S) fails, so bisection finds j with P(j) passing and P(j+1) failing: candidate j is the first one
   whose low precision breaks the outputs. Add it, continue from j + 1 (P(j + 1) with the new S is P(j)).
3. Minimise: drop each member found in 2 whose removal still passes; a kept member's removal is its "why"
   (non-finite outputs, with the op named by re-running the layer under check_numerics, or the error it causes).
4. Training files (the trace ran MP504's training step for the model): one training step with S applied and the
   script's loss scaling (gradients.py, on training_step.py's step: training mode, seeded labels, random layers
   fixed, a dynamic scale settled; one float32 reference for every configuration). If its gradients still
   underflow (MP504's threshold) and the script has no loss scaling, the step is tried with the scale a
   LossScaleOptimizer starts at; if that clears it, the plan says to use loss scaling. Otherwise the layers
   holding the variables that flush join S (reason "gradient"), a few rounds at most (keeping a later layer in
   float32 can show an earlier one flushing), and what remains is said.
"""

from __future__ import annotations

import linecache
import math
import time
from dataclasses import replace

from mpdoctor.facts.dtypes import LOW_PRECISION, OVERFLOW, UNDERFLOW, compute_dtype, dtype_name, has_float16_literal
from mpdoctor.facts.keras_semantics import INITIAL_LOSS_SCALE, layer_compute_dtype, risky_activation, sublayers
from mpdoctor.facts.schema import (
    FAILED_BUILD,
    GRADIENT_FLUSH_THRESHOLD,
    GradientRecord,
    LineConstant,
    ModelGraph,
    ModelRecord,
    PlanCheck,
    PlanLayer,
    PlanRecord,
)
from mpdoctor.facts.trace_request import NumericsRequest, PlanRequest
from mpdoctor.trace.child import backends, numerics
from mpdoctor.trace.child.gradients import gradient_record, prepare, variable_name
from mpdoctor.trace.child.keras_adapter import restore_layer_policy, set_layer_policy
from mpdoctor.trace.child.layer_api import flatten
from mpdoctor.trace.child.probe import MISSING, restore_calls
from mpdoctor.trace.child.training_step import TrainingStep

GRADIENT_ROUNDS = 3  # layers added for flushing gradients, then the step re-run: at most this many times
# Every forward pass starts from numerics.SEED (see there); a second seed tells whether the model draws at all.
SEED = numerics.SEED
OTHER_SEED = SEED + 1
# Two float32 runs with the same seed may differ by this share of rtol (GPU reductions are not bit-exact) before the
# reference is called not repeatable.
REPEAT_TOLERANCE = 0.1
POLICIES = ("mixed_float16", "mixed_bfloat16", "float16", "bfloat16")


def plan_model(
    model, record: ModelRecord, recorder, options: PlanRequest, numerics_request: NumericsRequest | None, module=None
) -> PlanRecord:
    """The plan of one analysed model (its graph and numerics are in `record`; `module`, the user's, tells how the
    file trains it); never raises. `options`: the `plan` part of the child's request (mpdoctor/plan.py)."""
    planner = None
    try:
        planner = _Planner(model, record, recorder, options, numerics_request)
        planner.module = module
        return planner.run()
    except Exception as exc:
        return PlanRecord(
            policy=str(options.policy or ""),
            rtol=float(options.rtol),
            skipped=f"internal error: {type(exc).__name__}: {str(exc)[:300]}",
        )
    finally:
        if planner is not None:
            planner.restore()


class _Unit:
    """A graph-node layer and the layers whose policy moves with it: (layer, policy under the plan's policy)."""

    def __init__(self, layer, node, moving: list):
        self.layer = layer
        self.uid = str(id(layer))
        self.node = node
        self.moving = moving  # the unit and those of its sublayers that compute in low precision under the policy
        self.high = False  # current state
        self.flops = 0.0
        self.called = False


class _Planner:
    def __init__(
        self, model, record: ModelRecord, recorder, options: PlanRequest, numerics_request: NumericsRequest | None
    ):
        self.model, self.record, self.recorder, self.options = model, record, recorder, options
        self.numerics_request = numerics.enabled_options(numerics_request)
        self.saved: dict[int, tuple] = {}  # id(layer) -> what restores its original policy
        self.passes = 0
        self.cache: dict[tuple, PlanCheck] = {}
        self.result = PlanRecord(policy="", rtol=float(options.rtol), mode="verify" if options.verify else "plan")
        self.training_step: TrainingStep | str | None = None  # made on the first gradient step
        self.module: object = None  # the user's module: how the file trains the model

    # ------------------------------------------------------------------------------------------ set-up

    def run(self) -> PlanRecord:
        started = time.perf_counter()
        result = self.result
        graph: ModelGraph | None = self.record.graph
        if graph is None:
            result.skipped = "the model has no layer graph"
            return result
        if self.record.failed_build:
            result.skipped = FAILED_BUILD
            return result
        if self.record.error is not None:
            result.skipped = "the model raised on its sample batch"
            return result
        layers = _unit_layers(self.model)
        current = [layer_compute_dtype(sub) for layer in layers for sub in _with_sublayers(layer)]
        file_low = [c for c in current if c in LOW_PRECISION]
        policy = self.options.policy or self._file_policy(layers) or "mixed_float16"
        if policy not in POLICIES:
            result.skipped = f"policy {policy!r} does not compute in float16/bfloat16"
            return result
        result.policy = policy
        result.model_location = self.record.location
        result.flavour = graph.flavour
        nodes = {}
        for node in graph.nodes:
            nodes.setdefault(node.uid, node)
        self.units = []
        for layer in layers:
            moving = [
                sub
                for sub in _with_sublayers(layer)
                if layer_compute_dtype(sub) in LOW_PRECISION or (not file_low and self._may_go_low(sub))
            ]
            if moving and str(id(layer)) in nodes:
                self.units.append(_Unit(layer, nodes[str(id(layer))], moving))
        if not self.units:
            result.skipped = "no layer computes in float16/bfloat16 under the policy"
            return result
        self._apply(set(), policy)  # everything under the policy: what the sample batch is built for
        session = numerics.Session(self.model, self.numerics_request, None)
        if not session.ready:
            result.skipped = session.record.skipped or "no sample batch"
            return result
        self.sample = session.sample
        reason = self._reference()
        if reason:
            result.skipped = reason
            return result
        self.units = [u for u in self.units if u.called]
        self.units.sort(key=lambda u: self.order[u.uid])
        result.candidates = len(self.units)
        result.naive_passes = len(self.units) + 1
        result.total_flops = self.total_flops
        if self.options.verify:
            result.final = self._check(frozenset(), policy)
        else:
            self._search(policy, nodes, graph)
            if self._trains():
                self._gradients(policy, graph)
        members = {u.uid for u in self.units if u.uid in {m.uid for m in self._members(result)}}
        result.low_precision_flops = sum(u.flops for u in self.units if u.uid not in members)
        if compute_dtype(policy) == "float16" and not self.options.verify:
            result.bfloat16 = self._check(frozenset(), "mixed_bfloat16")
        result.forward_passes = self.passes
        result.seconds = round(time.perf_counter() - started, 3)
        return result

    def _members(self, result: PlanRecord) -> list[_Unit]:
        ids = {layer.id for layer in result.layers}
        return [u for u in self.units if u.node.id in ids]

    def _file_policy(self, layers) -> str | None:
        """The low-precision policy most of the model's layers have."""
        names = [_policy_name(sub) for layer in layers for sub in _with_sublayers(layer)]
        low = [n for n in names if n and compute_dtype(n) in LOW_PRECISION]
        return max(set(low), key=low.count) if low else None

    def _may_go_low(self, layer) -> bool:
        """A float32 layer of a float32 file goes under the requested policy unless the file itself gave it
        dtype="float32" (a library's own float32 layers follow their policy, as they would under the global one)."""
        if layer_compute_dtype(layer) != "float32":
            return False
        created = self.recorder.layers.get(str(id(layer))) if self.recorder is not None else None
        if created is None or created.explicit_dtype is None:
            return True
        mine = created.created_at is not None and created.created_at.file == self.recorder.user_file
        return not mine

    # ------------------------------------------------------------------------------------------ runs

    def _set(self, layer, policy: str) -> None:
        key = id(layer)
        if key not in self.saved:
            self.saved[key] = set_layer_policy(layer, policy)
        else:
            set_layer_policy(layer, policy)

    def _apply(self, high: set[str], policy: str) -> None:
        for unit in self.units:
            for layer in unit.moving:
                self._set(layer, "float32" if unit.uid in high else policy)
            unit.high = unit.uid in high

    def restore(self) -> None:
        for saved in self.saved.values():
            restore_layer_policy(saved)
        self.saved.clear()

    def _forward(self, wrap: dict | None = None, seed: int = SEED):
        """One model call on the sample, random numbers seeded with `seed`; `wrap`: {layer: fn(bound) -> call}
        instance wrappers for this pass."""
        patched = []
        for layer, make in (wrap or {}).items():
            patched.append((layer, layer.__dict__.get("call", MISSING)))
            object.__setattr__(layer, "call", make(layer.call))
        self.passes += 1
        try:
            numerics.seed_random(seed)
            return self.model(self.sample, training=False)
        finally:
            restore_calls(patched)

    def _reference(self) -> str | None:
        """The all-float32 run: the outputs to compare against, the order units return in, their FLOPs."""
        import numpy as np

        self._apply({u.uid for u in self.units}, self.result.policy)
        self.order: dict[str, int] = {}

        digests: dict[str, list[str]] = {}

        def recorder(unit):
            def make(bound):
                def call(*args, **kwargs):
                    outputs = bound(*args, **kwargs)
                    unit.called = True
                    self.order.setdefault(unit.uid, len(self.order))
                    unit.flops += _flops(unit.layer, outputs)
                    digests.setdefault(unit.uid, []).append(_digest(outputs))
                    return outputs

                return call

            return make

        try:
            outputs = self._forward({u.layer: recorder(u) for u in self.units})
        except Exception as exc:
            return f"the float32 reference run raised {type(exc).__name__}: {numerics.first_line(exc)}"
        self.reference = _arrays(outputs)
        if not self.reference or not any(a.size for a in self.reference):
            return "the model has no float outputs to compare"
        if not all(np.isfinite(a).all() for a in self.reference):
            return "the float32 reference outputs are not finite on the sample batch: nothing to compare against"
        self.total_flops = float(sum(u.flops for u in self.units))
        return self._repeatable(digests)

    def _repeatable(self, digests: dict[str, list[str]]) -> str | None:
        """Whether the float32 reference repeats itself, so that a difference under the policy is the policy's (issue
        32 item 18): a run with another seed tells whether the model draws random numbers in inference mode (which
        layer: the first whose outputs change); if it does, a second run with the same seed must repeat the
        reference, else no plan is made."""
        other: dict[str, list[str]] = {}

        def digesting(unit):
            def make(bound):
                def call(*args, **kwargs):
                    outputs = bound(*args, **kwargs)
                    other.setdefault(unit.uid, []).append(_digest(outputs))
                    return outputs

                return call

            return make

        try:
            reseeded = _arrays(self._forward({u.layer: digesting(u) for u in self.units}, seed=OTHER_SEED))
            if _same(reseeded, self.reference):
                return None
            again = _arrays(self._forward())
        except Exception as exc:
            return f"the float32 reference run raised {type(exc).__name__} when run again: {numerics.first_line(exc)}"
        changed = sorted((u for u in self.units if other.get(u.uid) != digests.get(u.uid)), key=self._order_of)
        layer = f"layer `{changed[0].layer.name}` ({type(changed[0].layer).__name__})" if changed else "the model"
        finite, difference = _compare(again, self.reference)
        if not finite or difference is None or difference > self.result.rtol * REPEAT_TOLERANCE:
            return (
                f"the float32 reference is not repeatable: {layer} draws random numbers in inference mode that do "
                "not follow the global seed, so two float32 runs differ; a plan would blame float16 for that noise "
                "(draw only when training, or seed the layer's random ops)"
            )
        self.result.notes.append(
            f"{layer} draws random numbers in inference mode: every run used the same seed ({SEED}), so float16 and "
            "float32 drew the same numbers"
        )
        return None

    def _order_of(self, unit: _Unit) -> int:
        return self.order.get(unit.uid, len(self.order))

    def _check(self, high: frozenset[str], policy: str, wrap: dict | None = None) -> PlanCheck:
        key = (high, policy)
        if key in self.cache and not wrap:
            return self.cache[key]
        self._apply(set(high), policy)
        check = PlanCheck(policy=policy, float32_layers=len(high))
        try:
            outputs = _arrays(self._forward(wrap))
        except Exception as exc:  # a configuration that raises does not pass
            check.finite, check.passed = False, False
            check.max_relative_error = None
            self.cache[key] = check
            self.result.notes.append(f"a configuration raised {type(exc).__name__}: {numerics.first_line(exc)}")
            return check
        check.finite, check.max_relative_error = _compare(outputs, self.reference)
        check.passed = (
            check.finite and check.max_relative_error is not None and check.max_relative_error <= (self.result.rtol)
        )
        self.cache[key] = check
        return check

    # ------------------------------------------------------------------------------------------ search

    def _search(self, policy: str, nodes: dict, graph: ModelGraph) -> None:
        result = self.result
        units = self.units
        members: dict[str, PlanLayer] = {}
        for unit, reason, detail, line in self._seeds(graph):
            members[unit.uid] = replace(self._layer(unit, reason, detail, graph), constant_line=line)
        result.initial = self._check(frozenset(), policy)
        found: list[_Unit] = []
        lo = 0
        n = len(units)
        for _ in range(n + 1):
            current = frozenset(members)
            if self._check(current, policy).passed:
                break
            if lo >= n:
                break  # everything after the last member is float32 and it still fails: report unverified

            def prefix_passes(j: int, current=current) -> bool:
                return self._check(current | {u.uid for u in units[j:]}, policy).passed

            a, b = lo, n  # P(a) passes, P(b) fails
            while b - a > 1:
                middle = (a + b) // 2
                if prefix_passes(middle):
                    a = middle
                else:
                    b = middle
            unit = units[a]
            members[unit.uid] = self._layer(unit, "", "", graph)
            found.append(unit)
            lo = a + 1
        # Minimise the part the sample found: a member whose removal still passes goes.
        for unit in found:
            without = frozenset(members) - {unit.uid}
            captured: dict = {}
            check = self._check(without, policy, wrap={unit.layer: _capturing(captured)})
            if check.passed:
                del members[unit.uid]
                continue
            entry = members[unit.uid]
            entry.relative_error = check.max_relative_error
            if not check.finite:
                entry.reason = "non-finite"
                entry.op = _first_bad_op(unit.layer, captured)
                entry.detail = "outputs inf/NaN without it" + (
                    f" (first non-finite op: {entry.op})" if entry.op else ""
                )
            else:
                entry.reason = "error"
                entry.detail = f"max relative error {check.max_relative_error:.2%} without it (rtol {result.rtol:.2%})"
        result.layers = [members[u.uid] for u in units if u.uid in members]
        result.final = self._check(frozenset(members), policy)

    # ------------------------------------------------------------------------------------------ gradients

    def _trains(self) -> bool:
        """The trace ran MP504's training step for this model: the file compiles or trains it."""
        gradients = self.record.gradients
        return gradients is not None and not gradients.skipped and self.module is not None

    def _step(self, members: set[str], policy: str, loss_scale: float | None = None) -> GradientRecord | None:
        """The training step (training_step.py) with `members` in float32: one float32 reference for all."""
        if self.training_step is None:
            self.training_step = prepare(self.model, self.module, self.numerics_request, self.sample)
        if not isinstance(self.training_step, TrainingStep):
            return None
        self._apply(members, policy)
        return gradient_record(
            self.model, self.record, self.module, self.numerics_request, loss_scale=loss_scale, step=self.training_step
        )

    def _gradients(self, policy: str, graph: ModelGraph) -> None:
        result = self.result
        members = {self._uid(layer.id): layer for layer in result.layers}  # uid -> PlanLayer
        record = self._step(set(members), policy)
        if record is None or record.skipped:
            return
        if record.underflows and record.loss_scaling == "none":
            scaled = self._step(set(members), policy, INITIAL_LOSS_SCALE)
            if scaled is not None and not scaled.skipped and not scaled.underflows:
                result.gradient_advice = (
                    f"{record.flushed_share:.0%} of the gradient values that are nonzero in float32 flush to zero "
                    f"under {policy} without loss scaling ({scaled.flushed_share:.1%} with the loss scaled by "
                    f"{INITIAL_LOSS_SCALE:g}, where a LossScaleOptimizer starts): use loss scaling "
                    "(keras.mixed_precision.LossScaleOptimizer, or model.fit, which scales for you) rather than more "
                    "float32 layers"
                )
                result.final = replace(result.final, gradients=record)  # a copy: checks are cached and shared
                return
        by_variable = {}
        for unit in self.units:
            for variable in getattr(unit.layer, "trainable_weights", []) or []:
                by_variable.setdefault(variable_name(variable), unit)
        for _ in range(GRADIENT_ROUNDS):
            if not record.underflows:
                break
            flushing = [
                by_variable[v.name]
                for v in record.variables
                if v.name in by_variable and v.flushed > v.nonzero_reference * GRADIENT_FLUSH_THRESHOLD
            ]
            added = [u for u in dict.fromkeys(flushing) if u.uid not in members]
            if not added:
                break
            for unit in added:
                entry = self._layer(unit, "gradient", "", graph)
                lost = [v for v in record.variables if by_variable.get(v.name) is unit]
                share = sum(v.flushed for v in lost) / max(sum(v.nonzero_reference for v in lost), 1)
                entry.detail = f"{share:.0%} of its gradient values flush to zero in {compute_dtype(policy)}"
                members[unit.uid] = entry
            stepped = self._step(set(members), policy)
            if stepped is None or stepped.skipped:
                break
            record = stepped
        order = {u.uid: i for i, u in enumerate(self.units)}
        result.layers = sorted(members.values(), key=lambda layer: order[self._uid(layer.id)])
        result.final = replace(self._check(frozenset(members), policy), gradients=record)
        if record.underflows:
            result.gradient_advice = (
                f"{record.flushed_share:.0%} of the gradient values that are nonzero in float32 still flush to zero "
                f"under {policy} with the plan ({_scaling(record)}): raise the loss scale or keep the layers holding "
                "the variables that flush in float32"
            )

    def _uid(self, layer_id: str) -> str:
        return next(u.uid for u in self.units if u.node.id == layer_id)

    def _seeds(self, graph: ModelGraph):
        """(unit, reason, detail, constant line) of the layers the rules say must compute in float32 whatever the
        sample shows."""
        by_uid = {u.uid: u for u in self.units}
        by_id = {u.node.id: u for u in self.units}
        for node, _output in graph.output_nodes():
            activation = risky_activation(node.class_name, node.activation)
            if activation and node.uid in by_uid:
                yield by_uid[node.uid], "output-activation", f"{activation} model output (MP401)", None
        scans = self.record.numerics.user_layers if self.record.numerics is not None else []
        for scan in scans:
            # as MP403's trace form: only a constant whose source line holds such a literal (the mean 0 of
            # tf.random.normal, a diagonal's zero padding are no underflow)
            constants = [c for c in scan.constants if self._literal_at(c)]
            if constants and scan.id in by_id:
                constant = constants[0]
                yield (
                    by_id[scan.id],
                    "constant",
                    f"a constant that is {constant.value} in float16 (line {constant.line}, MP403)",
                    constant.line,
                )

    def _literal_at(self, constant: LineConstant) -> bool:
        user_file = getattr(self.recorder, "user_file", None)
        text = linecache.getline(user_file, constant.line) if user_file else ""
        return has_float16_literal(text, UNDERFLOW if constant.value == "0" else OVERFLOW)

    def _layer(self, unit: _Unit, reason: str, detail: str, graph: ModelGraph) -> PlanLayer:
        node = unit.node
        where = node.created_at
        user_file = getattr(self.recorder, "user_file", None)
        records = getattr(self.recorder, "layers", {}) or {}
        same_line = sum(1 for r in records.values() if where is not None and r.created_at == where)
        return PlanLayer(
            id=node.id,
            name=node.name,
            class_name=node.class_name,
            reason=reason,
            detail=detail,
            flops=unit.flops,
            created_at=where,
            path=_path(graph, node),
            user_code=bool(where is not None and user_file and where.file == user_file),
            created_with=max(same_line, 1),
        )


# ---------------------------------------------------------------------------------------------- helpers


def _unit_layers(model) -> list:
    """The graph-node layers of a model: its layers, recursively through nested models (never the sublayers of an
    ordinary layer); input layers excluded."""
    found = []
    for layer in sublayers(model, recursive=False):
        if type(layer).__name__ == "InputLayer":
            continue
        if callable(getattr(layer, "compile", None)) and hasattr(layer, "fit"):  # a nested model
            found.extend(_unit_layers(layer))
        else:
            found.append(layer)
    return found


def _with_sublayers(layer) -> list:
    return sublayers(layer, recursive=True, include_self=True)


def _policy_name(layer) -> str | None:
    policy = getattr(layer, "dtype_policy", None) or getattr(layer, "_dtype_policy", None)
    return getattr(policy, "name", None)


def _path(graph: ModelGraph, node) -> list[str]:
    """Layer names from the top model down to the node (the chain of get_layer calls that reaches it)."""
    names = [node.name]
    parent = graph.node(node.parent) if node.parent else None
    while parent is not None:
        names.insert(0, parent.name)
        parent = graph.node(parent.parent) if parent.parent else None
    return names


def _arrays(outputs) -> list:
    found = []
    for value in flatten(outputs, []):
        name = dtype_name(getattr(value, "dtype", None)) or ""
        if name.startswith(("float", "bfloat")) and hasattr(value, "shape"):
            found.append(backends.to_float32(value).reshape(-1))
    return found


def _digest(outputs) -> str:
    """A fingerprint of a layer's float outputs (whether two runs computed the same)."""
    import hashlib

    digest = hashlib.blake2b(digest_size=16)
    for array in _arrays(outputs):
        digest.update(array.tobytes())
    return digest.hexdigest()


def _same(outputs: list, reference: list) -> bool:
    return len(outputs) == len(reference) and all(
        a.shape == b.shape and a.tobytes() == b.tobytes() for a, b in zip(outputs, reference, strict=True)
    )


def _compare(outputs: list, reference: list) -> tuple[bool, float | None]:
    """(all finite, max over outputs of max |y - y32| / max |y32|)."""
    import numpy as np

    if len(outputs) != len(reference):
        return False, None
    finite = all(np.isfinite(a).all() for a in outputs)
    if not finite:
        return False, None
    worst = 0.0
    for got, want in zip(outputs, reference, strict=True):
        if got.shape != want.shape:
            return finite, None
        if not want.size:
            continue
        scale = float(np.max(np.abs(want)))
        error = float(np.max(np.abs(got - want)))
        worst = max(worst, error / scale if scale else error)
    return finite, worst


def _flops(layer, outputs) -> float:
    """Estimated multiply-adds of one call: for each weight matrix or kernel, its size times the output positions it
    is applied at (output elements / channels); plus one per output element (the elementwise part)."""
    elements, channels = 0, 1
    for value in flatten(outputs, []):
        shape = getattr(value, "shape", None)
        if shape is None:
            continue
        dims = [int(d) for d in shape if d is not None]
        elements += math.prod(dims)
        channels = dims[-1] if dims and dims[-1] else channels
    macs = float(elements)
    try:
        weights = list(layer.weights)
    except Exception:
        weights = []
    for weight in weights:
        shape = [int(d) for d in getattr(weight, "shape", ())]
        if len(shape) >= 2:
            macs += math.prod(shape) * elements / max(channels, 1)
    return macs


def _capturing(captured: dict):
    def make(bound):
        def call(*args, **kwargs):
            if "args" not in captured:
                captured["args"], captured["kwargs"] = args, kwargs
            return bound(*args, **kwargs)

        return call

    return make


def _first_bad_op(layer, captured: dict) -> str | None:
    """The op that produces the first inf/NaN when the layer runs on the inputs it had: the backend's numerics
    checking raises there and names the op."""
    if "args" not in captured:
        return None
    try:
        with backends.raising_at_first_non_finite():
            layer(*captured["args"], **captured["kwargs"])
    except Exception as exc:
        return backends.op_named(exc)
    return None


def _scaling(record: GradientRecord) -> str:
    if record.loss_scaling == "none":
        return "without loss scaling"
    return f"{record.loss_scaling} at scale {record.loss_scale:g}"
