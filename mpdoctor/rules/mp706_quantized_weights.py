"""MP706 quantized-weights-mismatch: quantized weights loaded into a float model, or float weights into a quantized
one."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Diagnostic
from mpdoctor.facts.keras_semantics import QUANTIZABLE_LAYERS
from mpdoctor.facts.quantization import mode_of_extra_count, mode_of_variables, quantized_layers
from mpdoctor.registry import ExceptionVerdict, define_rule, exception_pattern, explains_exception, trace_check
from mpdoctor.trace_context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import ExceptionRecord, Facts

define_rule(
    "MP706",
    "quantized-weights-mismatch",
    "error",
    "T",
    False,
    summary="Quantized weights (int8/int4/float8 kernels with their scales) loaded into a float model, or the "
    "reverse: the load fails with a variable count mismatch.",
    what="""
        Keras 3, trace pass: the run's `load_weights` raised "Layer 'dense' expected 2 variables, but received 3
        variables during loading" for a `Dense`, `EinsumDense` or `Embedding` and either the layer is quantized
        (it expects `kernel_scale`, `kernel_zero`/`g_idx`, or float8 `*_amax_history`) or the file holds exactly
        the variables a quantized layer adds (int8: 1, int4: 3, float8: 6). Reported instead of MP001, naming the
        two sides. When the message alone cannot tell (keras-hub's `ReversibleEmbedding` reports "received 0"; a
        float `Dense` without bias receiving 2 variables is as likely a float file with a bias), the file the run
        loaded is read, when it is on disk, and its quantized layers decide. Other variable count mismatches (a
        different architecture) stay MP001.
        """,
    why="""
        A `.weights.h5` stores each layer's variables by index, without the layer's dtype policy. Measured on
        Keras 3.15.1: an int8 `Dense` saves `kernel` (int8), `bias`, `kernel_scale`; int4 adds `kernel_zero` and
        `g_idx`; float8 six scales and amax histories. Loading such a file into the float model (or float weights
        into the quantized model) raises "ValueError: A total of 2 objects could not be loaded ... expected 2
        variables, but received 3". What loads: quantize the model the same way before `load_weights`
        (`model.quantize("int8")`), or save and load the whole `.keras` file (`keras.models.load_model` restores
        the quantized policies from the config). `mpdoctor inspect FILE` lists a file's quantized layers.
        """,
    bad="""
        import keras

        def build():
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(3)])

        quantized = build()
        quantized.quantize("int8")
        quantized.save_weights("int8.weights.h5")

        model = build()
        model.load_weights("int8.weights.h5")
        """,
    good="""
        import keras

        def build():
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(3)])

        quantized = build()
        quantized.quantize("int8")
        quantized.save_weights("int8.weights.h5")

        model = build()
        model.quantize("int8")   # the same variables as the file: int8 kernels and their scales
        model.load_weights("int8.weights.h5")
        """,
    fix="""
        None: whether the model should be quantized, or the float checkpoint found, is the author's choice.
        """,
)

_COUNT_MISMATCH = re.compile(
    r"Layer '(?P<layer>[^']+)' expected (?P<expected>\d+) variables, but received (?P<received>\d+) variables "
    r"during loading\. Expected: \[(?P<names>[^\]]*)\]"
)
_OBJECT_CLASS = re.compile(r"for object <(?P<cls>\w+) name=(?P<name>[^,>]+)")
_NOT_LOADED = re.compile(r"objects? could not be loaded")


@dataclass(frozen=True, kw_only=True)
class QuantizedWeightsVerdict(ExceptionVerdict):
    model_mode: str | None  # the layer's quantization mode, None: a float layer
    file_mode: str | None  # what the file's extra variables show, None: not known from the message (the trace
    # check then reads the file, when it is on disk)
    expected: int
    received: int


@exception_pattern("MP706", order=25)
def quantized_weights(message: str) -> QuantizedWeightsVerdict | None:
    """A variable-count mismatch on load that the message alone shows to be a quantized side's."""
    verdict = read_load_mismatch(message)
    return verdict if verdict is not None and (verdict.model_mode or verdict.file_mode) else None


def read_load_mismatch(message: str) -> QuantizedWeightsVerdict | None:
    """A Keras 3 variable-count mismatch on load of a quantizable layer class, with what its message shows of a
    quantized side (none: the trace check reads the file)."""
    match = _COUNT_MISMATCH.search(message)
    owner = _OBJECT_CLASS.search(message)
    if match is None or owner is None or owner["cls"] not in QUANTIZABLE_LAYERS or not _NOT_LOADED.search(message):
        return None
    names = [name.strip().strip("'\"") for name in match["names"].split(",") if name.strip()]
    expected, received = int(match["expected"]), int(match["received"])
    model_mode = mode_of_variables(names)
    file_mode = mode_of_extra_count(received - expected) if model_mode is None else None
    if model_mode is None and names == ["kernel"] and received == 2:
        file_mode = None  # as likely a float Dense with a bias loaded into one without (measured: the same message)
    return QuantizedWeightsVerdict(
        model_mode=model_mode,
        file_mode=file_mode,
        expected=expected,
        received=received,
        layer=match["layer"],
        layer_class=owner["cls"],
    )


@explains_exception("MP706")
def explained_by_quantized_file(exception: ExceptionRecord, facts: Facts, found: list[Diagnostic]) -> bool:
    """A mismatch the message left open, which the loaded file showed to be quantized (MP706 reported it)."""
    return read_load_mismatch(exception.message or "") is not None and any(d.code == "MP706" for d in found)


@trace_check("MP706")
def trace_quantized_weights(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    exception = facts.exception
    verdict = read_load_mismatch(exception.message or "") if exception is not None else None
    if exception is None or verdict is None:
        return []
    file_mode = verdict.file_mode
    if verdict.model_mode is None and file_mode is None:
        file_mode = _file_mode(facts, ctx)
        if file_mode is None:
            return []  # a float model and nothing that says the file is quantized: another mismatch (MP001)
    layer = f"`{verdict.layer}` ({verdict.layer_class})"
    counts = f"expected {verdict.expected} variables, the file has {verdict.received}"
    if verdict.received == 0:  # the message says nothing of the file: its quantized layers did (_file_mode)
        counts = f"found none of its {verdict.expected} variables, the file holds {file_mode} layers"
    if verdict.model_mode is not None:
        message = (
            f"loading float (or differently quantized) weights into a model quantized to {verdict.model_mode}: "
            f'{layer} {counts}; load the float weights before `quantize("{verdict.model_mode}")`, or save the '
            f"quantized model and load that"
        )
    else:
        message = (
            f"loading {file_mode}-quantized weights (kernels with their scales) into a float model: {layer} "
            f'{counts}; call `model.quantize("{file_mode}")` before `load_weights`, or load the whole '
            f"`.keras` file with `keras.models.load_model`"
        )
    return [ctx.diagnostic("MP706", exception.location, message)]


def _file_mode(facts: Facts, ctx: TraceContext) -> str | None:
    """The quantization mode of the weights file the run's last `load_weights` read, when it is on disk (a file
    the run saved itself went to the trace's scratch directory and is gone): its quantized layers' one mode."""
    loads = [r for r in facts.restores if r.path and r.api.endswith("load_weights")]
    if not loads:
        return None
    # A script's trace runs in mpdoctor's working directory (a notebook's in its folder): relative paths are read
    # from there first.
    candidates = [os.path.abspath(loads[-1].path or ""), os.path.join(os.path.dirname(ctx.path), loads[-1].path or "")]
    path = next((c for c in candidates if os.path.isfile(c)), None)
    if path is None:
        return None
    try:
        from mpdoctor.artifacts.sources import read_checkpoint

        listing = read_checkpoint(path)
    except Exception:  # no numpy/h5py here, not a weights file, unreadable: no evidence
        return None
    modes = {q.mode for q in quantized_layers([(v.key, v.dtype, v.shape) for v in listing.variables])}
    return modes.pop() if len(modes) == 1 else None
