"""Numerics under trace (runs in the trace child): the same sample batch through the model twice, under float32 and
under the model's own float16/bfloat16 policy, with identical weights; per-layer statistics only.

How the two runs share the weights: the reference run swaps the dtype policy of every layer computing in
float16/bfloat16 to float32 in place (the variables of `mixed_*` policies are float32 already) and restores it
afterwards. Each run is one forward pass from the same random seed (the float32 one twice: a layer whose float32
outputs differ between the two, random numbers that ignore the seed, gets no error, nor the layers its noise
reaches); `call` of every graph layer (nested models and their layers included, functional, Sequential or
subclassed alike) is wrapped on the instance for the pass, and the wrapper keeps statistics of the layer's outputs,
never the activations: max |x| over the finite elements, whether all are finite, and a strided sample of at most
`SAMPLE_CAP` elements of the float32 output, against which the float16 output is
compared (exact for outputs up to that size).

Relative error of a layer = max |y16 - y32| over the compared elements / max |y32| of the whole reference output:
the worst element error as a fraction of the layer's range, so near-zero activations (ReLU zeros) cannot blow it up.

Order: layers are listed in the order their calls RETURN in the float16 run, a topological order in which the
layers inside a nested model or a custom block come before the block itself. A layer called several times
aggregates its calls (finite = all finite, max over calls).

Besides the table:
- the FIRST non-finite layer's float16 call is re-run under `tf.debugging.enable_check_numerics()` to name the op
  that produced the first inf/NaN (MP404);
- user-defined layers (custom layer classes and Lambdas of the user's file) computing in float16 are traced into a
  graph with their observed float16 inputs, and the graph is scanned for float16 constants that are +-inf or zero
  (an out-of-range literal after conversion), overflow-prone ops computing in float16, and the lines whose ops
  compute in float16 (trace forms of MP403 / MP407);
- a compiled model's loss is evaluated on the float16 predictions and the dtype it computes in is recorded (MP503).
"""

from __future__ import annotations

import inspect
import os
import re
from dataclasses import replace

from mpdoctor.facts.dtypes import LOW_PRECISION, dtype_name
from mpdoctor.facts.keras_semantics import layer_compute_dtype, sublayers
from mpdoctor.facts.schema import (
    FirstNonFinite,
    LineConstant,
    LineOp,
    LossRecord,
    ModelGraph,
    NumericsRecord,
    NumericsRow,
    UserLayerScan,
)
from mpdoctor.facts.trace_request import NumericsRequest
from mpdoctor.trace.child import backends, samples
from mpdoctor.trace.child.layer_api import flatten
from mpdoctor.trace.child.probe import MISSING, restore_calls

# The float16 run and the float32 reference each start from this seed, so a layer that draws random numbers in
# inference mode (tf.random.* or keras.random.* without a seed) draws the same numbers in both, rounded (measured on
# TF 2.21, Keras 3 and tf_keras): its noise is not taken for a float16 error.
SEED = 20260
# Two float32 runs with the same seed: a layer's error against float16 may change by this much (GPU reductions are
# not bit-exact) before its float32 output is called not repeatable.
REPEAT_TOLERANCE = 1e-3
SAMPLE_CAP = 65536  # compared elements per layer output (strided sample above that)
LARGE_TENSOR = 262144  # elements above which statistics are computed by TF ops rather than numpy
MAX_PARAMS = 100_000_000  # "small enough": above this the two extra forward passes are skipped
# Ops TF's auto-mixed-precision keeps out of float16 (deny list) and ops whose float16 result overflows easily.
UNSAFE_OPS = frozenset(
    {
        "Exp",
        "Expm1",
        "Pow",
        "Square",
        "Sum",
        "Mean",
        "L2Loss",
        "Log",
        "SoftmaxCrossEntropyWithLogits",
        "SparseSoftmaxCrossEntropyWithLogits",
    }
)


def options_from_request(request: NumericsRequest | None) -> NumericsRequest:
    """The options of the `numerics` part of the child's request (mpdoctor.config.NumericsConfig.request): the
    defaults without one."""
    return request if request is not None else NumericsRequest()


def enabled_options(request: NumericsRequest | None) -> NumericsRequest:
    """The request's options with the comparison on whatever it says: the plan, MP504's gradients and the step
    check need a sample batch and a session of their own."""
    return replace(options_from_request(request), enabled=True)


# ---------------------------------------------------------------------------------------------------- sample batch


def sample_inputs(model, batch_size: int = 2, seed: int = 0, low: float = 0.0, high: float = 1.0):
    """A deterministic batch in the model's input structure (mpdoctor.trace.child.samples), None when the model
    declares no inputs."""
    sample = samples.sample_batch(model, NumericsRequest(batch_size=batch_size, seed=seed, range=[low, high]))
    return sample.value if sample is not None else None


# ---------------------------------------------------------------------------------------------------- statistics


def _float_tensors(outputs) -> list:
    found = []
    for value in flatten(outputs, []):
        name = dtype_name(getattr(value, "dtype", None))
        if isinstance(name, str) and name.startswith(("float", "bfloat")) and hasattr(value, "shape"):
            found.append(value)
    return found


def _stats(outputs):
    """(finite, max |x| over finite elements or None, compared sample) of a layer call's float outputs."""
    import numpy as np

    tensors = _float_tensors(outputs)
    if not tensors:
        return None
    parts = [_tensor_stats(tensor) for tensor in tensors]
    sizes = [part[3] for part in parts]
    stride = max(1, -(-sum(sizes) // SAMPLE_CAP))
    present = [part[1] for part in parts if part[1] is not None]
    sample = np.concatenate([part[2][::stride] for part in parts])
    return all(part[0] for part in parts), (max(present) if present else None), sample


def _tensor_stats(tensor):
    """(finite, max |x| over finite elements or None, flat float32 view or strided copy, size) of one tensor.
    Large tensors are reduced by TF ops (multi-threaded, no float32 copy of the activation); small ones in numpy
    after one cast, where TF's per-op dispatch would cost more than the arithmetic."""
    import numpy as np

    if not backends.tensorflow():  # JAX, PyTorch: one host copy in float32, reduced in numpy
        return _array_stats(backends.to_numpy(tensor).astype(np.float32).reshape(-1))
    import tensorflow as tf

    flat = tf.reshape(tensor, [-1])
    size = int(flat.shape[0])
    if size > LARGE_TENSOR:
        finite = bool(tf.reduce_all(tf.math.is_finite(flat)))
        magnitude = tf.abs(flat) if finite else tf.where(tf.math.is_finite(flat), tf.abs(flat), tf.zeros_like(flat))
        max_abs = float(tf.reduce_max(magnitude))
        if not finite and max_abs == 0.0 and not bool(tf.reduce_any(tf.math.is_finite(flat))):
            max_abs = None
        stride = -(-size // SAMPLE_CAP)
        return finite, max_abs, np.asarray(tf.cast(flat[::stride], tf.float32)), size
    return _array_stats(np.asarray(tf.cast(flat, tf.float32)))


def _array_stats(values):
    """`_tensor_stats` of a flat float32 numpy array."""
    import numpy as np

    size = int(values.size)
    mask = np.isfinite(values)
    finite = bool(mask.all())
    kept = values if finite else values[mask]
    sample = values[:: -(-size // SAMPLE_CAP)] if size > LARGE_TENSOR else values  # as the TF path keeps it
    return finite, (float(np.max(np.abs(kept))) if kept.size else None), sample, size


def _float_arrays(outputs) -> list:
    import numpy as np

    host = np.asarray if backends.tensorflow() else backends.to_numpy  # a torch tensor that requires grad: detached
    return [np.asarray(host(t), dtype=np.float32).reshape(-1) for t in _float_tensors(outputs)]


class _Run:
    """Per-call statistics of one forward pass, keyed by layer uid (str(id(layer))): [(finite, max_abs, sample)]
    in call order, and the order in which layers' calls returned. The float16 run keeps the compared samples, the
    arguments of the first non-finite call and of user layers to scan; the float32 run (`low` given) keeps no
    sample and computes each call's relative error against the float16 one."""

    def __init__(self, low: _Run | None = None, capture: set[str] = frozenset()):
        self.calls: dict[str, list] = {}
        self.order: list[str] = []
        self.low = low
        self.capture = capture
        self.errors: dict[str, float | None] = {}
        self.first_bad: tuple | None = None  # (uid, layer, args, kwargs) of the first non-finite call
        self.captured: dict[str, tuple] = {}  # uid -> (args, kwargs) of the first call of a layer to scan
        self.empty: set[str] = set()  # layers with an output without elements (float32 run)

    def record(self, uid: str, layer, outputs, args, kwargs) -> None:
        stats = _stats(outputs)
        if uid not in self.calls:
            self.calls[uid] = []
            self.order.append(uid)
        index = len(self.calls[uid])
        if stats is None:
            self.calls[uid].append(None)
            return
        finite, max_abs, sample = stats
        if self.low is None:
            self.calls[uid].append((finite, max_abs, sample))
            if uid in self.capture and uid not in self.captured:
                self.captured[uid] = (args, kwargs)
            if not finite and self.first_bad is None:
                self.first_bad = (uid, layer, args, kwargs)
            return
        self.calls[uid].append((finite, max_abs, None))
        if not sample.size:
            self.empty.add(uid)
        low_calls = self.low.calls.get(uid) or []
        low = low_calls[index] if index < len(low_calls) else None
        if low is None or not finite or not low[0] or low[2].shape != sample.shape:
            return
        import numpy as np

        error = float(np.max(np.abs(sample - low[2]))) if sample.size else 0.0
        if max_abs:
            error /= max_abs
        elif error:
            error = None  # an all-zero reference: no scale to relate the error to
        previous = self.errors.get(uid, 0.0)
        self.errors[uid] = None if error is None or previous is None else max(previous, error)


def _instrument(layers: list, run: _Run):
    """Wrap `call` on each layer instance (removed again by `_restore`): statistics of every call's outputs."""
    patched = []
    for layer in layers:
        patched.append((layer, layer.__dict__.get("call", MISSING)))
        object.__setattr__(layer, "call", _recording(layer, layer.call, run))
    return patched


def _recording(layer, bound, run: _Run):
    uid = str(id(layer))

    def call(*args, **kwargs):
        outputs = bound(*args, **kwargs)
        run.record(uid, layer, outputs, args, kwargs)
        return outputs

    return call


def _restore(patched) -> None:
    restore_calls(patched)


# ---------------------------------------------------------------------------------------------------- policies


def _swap_to_float32(layers) -> list:
    """Set every low-precision layer's policy to float32 (through its Keras line's adapter: the policy lives in
    private attributes), and cast the low-precision constants such a layer built for its compute dtype (tf_keras
    `Normalization` keeps its mean and variance as float16 tensors, which a float32 call cannot mix with its float32
    inputs) to float32: the reference run then uses the same values in float32. Returns what `_restore_policies`
    needs: functions that undo each change."""
    from mpdoctor.trace.child.keras_adapter import set_layer_policy

    undo = []
    for layer in layers:
        if layer_compute_dtype(layer) not in LOW_PRECISION:
            continue
        originals = _cast_constants(layer)
        undo.append(lambda layer=layer, originals=originals: _set_attributes(layer, originals))
        undo.append(set_layer_policy(layer, "float32"))
    return undo


def _cast_constants(layer) -> dict:
    """Replace the layer's float16/bfloat16 tensor attributes (constants, never variables) by float32 copies;
    returns the originals."""
    if not backends.tensorflow():
        return _cast_backend_constants(layer)
    import tensorflow as tf

    originals = {}
    for name, value in list(vars(layer).items()):
        if (
            isinstance(value, tf.Tensor)
            and not isinstance(value, tf.Variable)
            and value.dtype in (tf.float16, tf.bfloat16)
        ):
            originals[name] = value
            object.__setattr__(layer, name, tf.cast(value, tf.float32))
    return originals


def _cast_backend_constants(layer) -> dict:
    """`_cast_constants` on JAX or PyTorch: the backend's tensors, cast with keras.ops."""
    import keras

    originals = {}
    for name, value in list(vars(layer).items()):
        if backends.is_tensor(value) and backends.dtype_of(value) in ("float16", "bfloat16"):
            originals[name] = value
            object.__setattr__(layer, name, keras.ops.cast(value, "float32"))
    return originals


def _restore_policies(saved) -> None:
    for undo in reversed(saved):
        undo()


def _set_attributes(layer, values: dict) -> None:
    for name, value in values.items():
        object.__setattr__(layer, name, value)


def _node_layers(model) -> list:
    """The layers that are nodes of the model's graph (mpdoctor/trace/child/graph.py): its layers, recursively
    through nested models, never the sublayers of an ordinary layer; input layers excluded (they are not called)."""
    found = []
    for layer in sublayers(model, recursive=False):
        if type(layer).__name__ != "InputLayer":
            found.append(layer)
        if callable(getattr(layer, "compile", None)) and hasattr(layer, "fit"):  # a nested model
            found.extend(_node_layers(layer))
    return found


def _is_user_layer(layer) -> bool:
    package = (type(layer).__module__ or "").split(".")[0]
    return type(layer).__name__ == "Lambda" or package not in ("keras", "tf_keras", "tensorflow", "tensorflow_hub")


# ---------------------------------------------------------------------------------------------------- entry


def skipped(options: NumericsRequest, reason: str | None) -> NumericsRecord:
    """An empty `numerics` record."""
    return NumericsRecord(
        batch_size=int(options.batch_size),
        seed=int(options.seed),
        skipped=reason,
        threshold=options.threshold,
    )


def failed(options: NumericsRequest, exc: BaseException) -> NumericsRecord:
    """The record of numerics that broke inside mpdoctor: skipped, with the error as the reason."""
    return skipped(options, f"internal error: {type(exc).__name__}: {str(exc)[:300]}")


class Session:
    """Numerics of one model, in the order the trace child needs them: `call()` is THE call of the model on its
    sample batch (the float16 run, instrumented; its exceptions are the model's, for the child to report), then,
    once the layer graph exists, `finish(graph)` runs the float32 reference and returns the `numerics` record."""

    def __init__(self, model, options: NumericsRequest, user_file: str | None):
        # No user file for a live model (Jupyter): user layers' ops then have no source line.
        self.model, self.options = model, options
        self.user_file = os.path.realpath(user_file) if user_file else None
        self.record = skipped(options, None)
        self.sample = None
        self.low: _Run | None = None
        self.outputs = None
        self.call_error: str | None = None  # what the model raised on the sample batch
        self.layers = _node_layers(model)
        if not options.enabled:
            self.record.skipped = "disabled (--no-numerics / numerics = false)"
            return
        low = [dtype for dtype in map(layer_compute_dtype, self.layers) if dtype in LOW_PRECISION]
        if not low:
            self.record.skipped = "no layer computes in float16/bfloat16"
            return
        self.record.dtype = max(set(low), key=low.count)
        try:
            params = int(model.count_params())
        except Exception:
            params = 0
        if params > MAX_PARAMS:
            self.record.skipped = f"{params:,} parameters: above the numerics bound of {MAX_PARAMS:,}"
            return
        try:
            sample = samples.sample_batch(model, options)
        except samples.SampleError as exc:
            self.record.skipped = f"cannot build the sample batch: {exc}"
            return
        except Exception as exc:
            self.record.skipped = f"cannot build the sample batch: {type(exc).__name__}: {first_line(exc)}"
            return
        if sample is None:
            self.record.skipped = "no input shape known to build a sample batch from"
            return
        self.sample = sample.value
        self.record.batch_size = sample.batch_size
        if sample.open_size is not None:
            self.record.open_size = sample.open_size
            self.record.open_size_how = sample.open_size_how

    @property
    def ready(self) -> bool:
        return self.sample is not None and self.record.skipped is None

    def call(self) -> None:
        """The float16 run: raises what the model raises."""
        scan = {
            str(id(layer)) for layer in self.layers if _is_user_layer(layer) and layer_compute_dtype(layer) == "float16"
        }
        run = _Run(capture=scan)
        patched = _instrument(self.layers, run)
        try:
            seed_random(SEED)
            self.outputs = self.model(self.sample, training=False)
        except BaseException as exc:
            self.call_error = f"{type(exc).__name__}: {first_line(exc)}"
            raise
        finally:
            _restore(patched)
        self.low = run

    def finish(self, graph: ModelGraph | None) -> NumericsRecord:
        record = self.record
        if record.skipped is not None:
            return record
        if self.low is None:
            record.skipped = f"the model raised on its sample batch ({self.call_error or 'unknown error'})"
            return record
        if not graph:
            record.skipped = "the model has no layer graph"
            return record
        try:
            reference = self._reference()
            _drop_unrepeatable(reference, self._reference())
        except Exception as exc:
            record.skipped = f"the float32 reference run raised {type(exc).__name__}: {first_line(exc)}"
            return record
        nodes = {}
        for node in graph.nodes:
            nodes.setdefault(node.uid, node)
        record.layers = _table(self.low, reference, nodes)
        if self.low.first_bad is not None and self.low.first_bad[0] in nodes:
            record.first_non_finite = _first_non_finite(
                nodes[self.low.first_bad[0]].id, *self.low.first_bad[1:], user_file=self.user_file
            )
        layers = {str(id(layer)): layer for layer in self.layers}
        record.user_layers = [
            _scan_layer(nodes[uid].id, layers[uid], args, kwargs, self.user_file)
            for uid, (args, kwargs) in self.low.captured.items()
            if uid in nodes
        ]
        record.loss = _loss_dtype(self.model, self.outputs)
        return record

    def _reference(self) -> _Run:
        """A float32 run of the sample batch, each layer's outputs compared with the float16 run's."""
        reference = _Run(low=self.low)
        saved = _swap_to_float32(sublayers(self.model, recursive=True, include_self=True))
        patched = _instrument(self.layers, reference)
        try:
            seed_random(SEED)
            self.model(self.sample, training=False)
        finally:
            _restore(patched)
            _restore_policies(saved)
        return reference


def _drop_unrepeatable(reference: _Run, again: _Run) -> None:
    """Forget the error of a layer whose float32 outputs are not the same on two runs with the same seed (random
    numbers in inference mode that ignore the seed: a tf.random.Generator, a seeded layer's advancing state), and
    of the layers its noise reaches: the difference is noise, not float16 (issue 32 item 18)."""
    for uid, error in reference.errors.items():
        repeated = again.errors.get(uid)
        if error is not None and (repeated is None or abs(repeated - error) > REPEAT_TOLERANCE):
            reference.errors[uid] = None


def _table(low: _Run, reference: _Run, nodes: dict) -> list[NumericsRow]:
    rows = []
    for uid in low.order:
        node = nodes.get(uid)
        calls = [c for c in low.calls[uid] if c is not None]
        if node is None or not calls or node.kind == "input":
            continue
        ref_calls = [c for c in reference.calls.get(uid, []) if c is not None]
        rows.append(
            NumericsRow(
                node.id,
                node.name,
                node.class_name,
                all(c[0] for c in calls),
                all(c[0] for c in ref_calls),
                _max(c[1] for c in calls),
                _max(c[1] for c in ref_calls),
                reference.errors.get(uid),
            )
        )
        if uid in reference.empty:
            rows[-1].empty_reference = True
    return rows


def _max(values) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def first_line(exc: BaseException) -> str:
    """The line of an exception's message that says what went wrong, not Keras's wrapper around it ("Exception
    encountered when calling X.call().", "Could not automatically infer the output shape ... Error encountered:")."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines() if line.strip()]
    causes = [line for line in lines if not line.startswith(_WRAPPERS) and not line.endswith("Error encountered:")]
    return ((causes or lines)[0] if lines else type(exc).__name__)[:200]


_WRAPPERS = ("Exception encountered", "Traceback", "File ", "in user code:")


def _first_non_finite(node_id: str, layer, args, kwargs, user_file: str | None = None) -> FirstNonFinite:
    """Which op of the first non-finite layer produced the first inf/NaN: its float16 call re-run with the backend's
    numerics checking (backends.raising_at_first_non_finite), which raises at the first op with a non-finite output
    and names its type. The op runs eagerly, so the exception's traceback holds the Python frames that ran it: the
    innermost one in the user's file is the op's line (inside the innermost custom layer, not the outer layer's
    class: issue 14 item 9)."""
    import numpy as np

    inputs_finite = all(np.isfinite(a).all() for a in _float_arrays((list(args), kwargs)))
    found = FirstNonFinite(node_id, None, inputs_finite)
    if not inputs_finite:
        return found
    try:
        with backends.raising_at_first_non_finite():
            layer(*args, **kwargs)
    except Exception as exc:
        found.op = backends.op_named(exc)
        line = _innermost_user_line(exc, user_file)
        if line is not None:
            found.line = line
    return found


def _innermost_user_line(exc: BaseException, user_file: str | None) -> int | None:
    """The line of the last frame in `user_file` over the exception's traceback and its causes (Keras re-raises
    a layer's exception with its own message; the original's traceback goes deepest)."""
    if user_file is None:
        return None
    line, seen = None, set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            if os.path.realpath(tb.tb_frame.f_code.co_filename) == user_file:
                line = tb.tb_lineno
            tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__
    return line


# ---------------------------------------------------------------------------------------------------- user layers


def _user_line(op, user_file: str | None) -> int | None:
    line = None
    if user_file is None:
        return None
    try:
        frames = op.traceback
    except Exception:
        return None
    for frame in frames:
        if os.path.realpath(frame.filename) == user_file:
            line = frame.lineno
    return line


def _source_range(layer) -> list[int] | None:
    target = getattr(layer, "function", None) if type(layer).__name__ == "Lambda" else type(layer)
    try:
        lines, start = inspect.getsourcelines(target)
    except (OSError, TypeError):
        return None
    return [start, start + len(lines) - 1]


def _scan_layer(node_id: str, layer, args, kwargs, user_file: str | None) -> UserLayerScan:
    """Trace a float16 user layer into a graph with its observed inputs and scan the graph's ops."""
    import numpy as np

    entry = UserLayerScan(node_id, type(layer).__name__, _source_range(layer))
    if not backends.tensorflow():  # no status "ok": the trace forms of MP403/MP407 stay with the static findings
        entry.status = f"not available on the {backends.current()} backend (the graph scan is TensorFlow's)"
        return entry
    import tensorflow as tf

    try:
        concrete = tf.function(lambda *a, **k: layer(*a, **k)).get_concrete_function(*args, **kwargs)
    except Exception as exc:
        entry.status = f"{type(exc).__name__}: {first_line(exc)}"
        return entry
    low_lines, seen = set(), set()
    for op in concrete.graph.get_operations():
        line = _user_line(op, user_file)
        if line is None:
            continue
        if any(t.dtype in (tf.float16, tf.bfloat16) for t in op.outputs):
            low_lines.add(line)
        if op.type in UNSAFE_OPS and any(t.dtype == tf.float16 for t in op.outputs) and (line, op.type) not in seen:
            seen.add((line, op.type))
            entry.ops.append(LineOp(line, op.type))
        for tensor in op.inputs:
            source = tensor.op
            if tensor.dtype != tf.float16 or source.type != "Const":
                continue
            try:
                value = tf.make_ndarray(source.get_attr("value"))
            except Exception:
                continue
            if value.size != 1:
                continue
            number = float(np.asarray(value, dtype=np.float32).reshape(-1)[0])
            if np.isinf(number) or number == 0.0:
                entry.constants.append(
                    LineConstant(line, op.type, "0" if number == 0.0 else ("inf" if number > 0 else "-inf"))
                )
    entry.float16_lines = sorted(low_lines)
    return entry


# ---------------------------------------------------------------------------------------------------- loss


def seed_random(seed: int) -> None:
    """The global seeds TensorFlow's and Keras 3's random ops derive theirs from (tf_keras's random layers use
    TensorFlow's)."""
    import sys

    if backends.tensorflow():
        import tensorflow as tf

        tf.random.set_seed(seed)
    keras = sys.modules.get("keras")
    seeder = getattr(getattr(keras, "utils", None), "set_random_seed", None)
    if seeder is not None and str(getattr(keras, "__version__", "")).startswith("3."):
        seeder(seed)  # resets Keras 3's global SeedGenerator too


def _loss_dtype(model, predictions) -> LossRecord | None:
    """The dtype the compiled loss computes in when fed the float16 predictions (Keras 3 losses cast predictions to
    their own dtype, float32 by default; tf_keras losses compute in the predictions' dtype)."""
    if not (getattr(model, "compiled", False) or getattr(model, "_is_compiled", False)):
        return None
    loss = getattr(model, "loss", None)
    if loss is None:
        return None
    import numpy as np

    flat = flatten(predictions, [])
    record = LossRecord(_loss_name(loss), [dtype_name(p.dtype) or str(p.dtype) for p in flat])

    def labels(sparse: bool):  # numpy labels, as tensors on TensorFlow (tf_keras's loss container does not take numpy)
        made = [
            np.zeros(tuple(p.shape[:-1]), np.int32) if sparse else np.zeros(tuple(p.shape), np.float32) for p in flat
        ]
        if backends.tensorflow():
            import tensorflow as tf

            made = [tf.constant(label) for label in made]
        return made[0] if len(made) == 1 else made

    for sparse in (False, True):
        try:
            value = model.compute_loss(x=None, y=labels(sparse), y_pred=predictions)
        except Exception as exc:
            record.error = f"{type(exc).__name__}: {first_line(exc)}"
            continue
        record.dtype = dtype_name(value.dtype) or str(value.dtype)
        record.error = None
        break
    return record


def _loss_name(loss) -> str:
    if isinstance(loss, str):
        return loss
    if isinstance(loss, (list, tuple)):
        return ", ".join(_loss_name(item) for item in loss)
    if isinstance(loss, dict):
        return ", ".join(f"{key}: {_loss_name(value)}" for key, value in loss.items())
    fn = getattr(loss, "fn", None)
    return getattr(fn, "__name__", None) or getattr(loss, "__name__", None) or type(loss).__name__
