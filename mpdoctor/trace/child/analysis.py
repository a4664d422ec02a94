"""What the trace child finds out about each model and the run: the model's one call on a sample batch (with the
numerics instrumented), its graph, the environment, SavedModels read and checkpoints audited and matched. Shared by
the child process and the in-process Jupyter path (`live_facts`). The environment's `cpu_bf16` (whether this CPU
computes bfloat16 natively: MP603, the plan's bfloat16 advice) is read from /proc/cpuinfo; `MPDOCTOR_CPU_BF16=1` or
`=0` forces it, to see what mpdoctor reports on the other kind of CPU (and to test both answers on one machine)."""

from __future__ import annotations

import contextlib
import os
import re
import traceback

from mpdoctor.facts.artifacts import SavedModelError, SavedModelInfo
from mpdoctor.facts.dtypes import dtype_name
from mpdoctor.facts.keras_semantics import (
    SAVEDMODEL_LAYER_APIS,
    autocast_flag,
    flavour_of,
    layer_policy,
    sublayers,
    version_tuple,
)
from mpdoctor.facts.schema import (
    FAILED_BUILD,
    Environment,
    ExceptionRecord,
    Facts,
    Gpu,
    LayerRecord,
    ModelRecord,
    Restore,
    SavedModelLoad,
    SourceRef,
    new_facts,
)
from mpdoctor.facts.trace_request import NumericsRequest
from mpdoctor.trace.child import audits, backends, numerics, samples, stop
from mpdoctor.trace.child import graph as graph_module
from mpdoctor.trace.child.keras_adapter import model_classes, policy_now
from mpdoctor.trace.child.layer_api import flatten

LIVE_HOW = "live object"


def environment() -> Environment:
    if not backends.tensorflow():
        return _keras_environment()
    import tensorflow as tf

    from mpdoctor.facts.keras_semantics import legacy_keras_env, tf_keras_major, tf_keras_package

    tf_version = version_tuple(tf.__version__)
    keras, tf_keras = _version("keras"), _version("tf-keras")
    legacy = tf_keras_package(tf_version, legacy_keras_env(), tf_keras is not None) == "tf_keras"
    gpus = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        gpus.append(
            Gpu(
                details.get("device_name", device.name),
                list(details["compute_capability"]) if details.get("compute_capability") else None,
            )
        )
    return Environment(
        cpu_bf16=_cpu_has_bf16(),
        tensorflow=tf.__version__,
        keras=keras,
        tf_keras=tf_keras,
        hub=_version("tensorflow-hub"),
        legacy_keras=legacy,
        keras_major=tf_keras_major(tf_version, legacy_keras_env(), keras, tf_keras is not None),
        gpus=gpus,
    )


def _keras_environment() -> Environment:
    """Keras 3 on JAX or PyTorch: no TensorFlow; the GPUs are the backend's own (their compute capability as the
    backend reports it, where it does)."""
    import keras

    backend = keras.config.backend()
    gpus = []
    with contextlib.suppress(Exception):  # a backend without a device query: a CPU run as far as MP603 goes
        if backend == "jax":
            import jax

            gpus = [Gpu(str(getattr(d, "device_kind", d)), _jax_capability(d)) for d in jax.devices("gpu")]
        elif backend == "torch":
            import torch

            if torch.cuda.is_available():
                gpus = [
                    Gpu(torch.cuda.get_device_name(i), list(torch.cuda.get_device_capability(i)))
                    for i in range(torch.cuda.device_count())
                ]
    keras_version = _version("keras")
    return Environment(
        cpu_bf16=_cpu_has_bf16(),
        keras=keras_version,
        keras_major=(version_tuple(keras_version) or (3, 0))[0],
        gpus=gpus,
        backend=backend,
    )


def _jax_capability(device) -> list[int] | None:
    text = str(getattr(device, "compute_capability", "") or "")
    parts = text.split(".")
    return [int(p) for p in parts] if len(parts) == 2 and all(p.isdigit() for p in parts) else None


def _version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


# Forces the CPU-feature probe: "1" a CPU that computes bfloat16 natively, "0" one that does not. Read in the child
# (it inherits the caller's environment), so a suite, a snapshot or a user can run as if on the other CPU.
CPU_BF16_ENV = "MPDOCTOR_CPU_BF16"


def _cpu_has_bf16() -> bool:
    """x86 CPUs with AVX512-BF16 or AMX compute bfloat16 natively (oneDNN uses them); `MPDOCTOR_CPU_BF16=0/1`
    overrides what /proc/cpuinfo says (any other value is ignored)."""
    forced = os.environ.get(CPU_BF16_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            flags = handle.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


# ---------------------------------------------------------------------------------------------- one model


def analyse_model(
    name: str, how: str, model, recorder, facts: Facts, numerics_request: NumericsRequest | None, call: bool = True
) -> ModelRecord:
    """Call the model once on its sample batch (the float16 run of the numerics), read its graph, finish the
    numerics. A model that raises is a finding (`record.error`, the run's exception), never a crash. `call=False`:
    its graph only (the trace ran out of time: stop.py). The timeout arriving here ends the call and the numerics,
    never the graph, and is no error of the model's."""
    created = recorder.layers.get(str(id(model)))
    record = ModelRecord(
        name,
        how,
        created.created_at if created else None,
        bool(getattr(model, "compiled", False) or getattr(model, "_is_compiled", False)),
    )
    options = numerics.options_from_request(numerics_request)
    session = outputs = None
    exception = facts.exception
    if exception is not None and exception.phase in ("import", "build") and getattr(model, "built", True) is False:
        record.failed_build = True  # the run raised while building it: nothing to call, its graph is partial
        record.numerics = numerics.skipped(options, FAILED_BUILD)
    elif not call:
        record.numerics = _out_of_time(options)
    else:
        try:
            session = numerics.Session(model, options, recorder.user_file)
        except BaseException as exc:
            record.numerics = _out_of_time(options) if stop.is_timeout(exc) else numerics.failed(options, exc)
        try:
            if session is not None and session.ready:
                session.call()  # the one call on a sample batch, instrumented for the float16 statistics
                outputs = session.outputs
            elif stop.requested() is None:  # (the numerics' set-up may have been what ran out of time)
                outputs = _call_once(model, options)
        except stop.TimedOut:
            session = None
            record.numerics = _out_of_time(options)
        except BaseException as exc:
            record.error = describe(exc, "call", recorder)
            if facts.exception is None:
                facts.exception = record.error
                facts.status = "exception"
    try:
        record.graph = graph_module.model_graph(model, recorder.layers)
        if outputs is not None:
            _observe_outputs(record.graph, outputs)
    except BaseException as exc:
        record.graph_error = f"{type(exc).__name__}: {exc}"
    if session is not None:
        try:
            record.numerics = session.finish(record.graph)
        except stop.TimedOut:
            record.numerics = _out_of_time(options)
        except BaseException as exc:
            record.numerics = numerics.failed(options, exc)
    return record


def _out_of_time(options: NumericsRequest):
    return numerics.skipped(options, "the trace ran out of time")


def _observe_outputs(graph, outputs) -> None:
    """The dtypes the model's call returned, on the graph's outputs (same flattening: dicts by sorted key)."""
    flat = flatten(outputs, [])
    if len(flat) != len(graph.outputs):
        return  # a model whose call returns another structure than it declares: nothing to pair safely
    for output, value in zip(graph.outputs, flat, strict=True):
        dtype = getattr(value, "dtype", None)
        if dtype is not None:
            output.observed_dtype = dtype_name(dtype)


def _call_once(model, options: NumericsRequest):
    """Run the model on a small deterministic batch that matches its inputs (catches failures that only happen
    when the model runs, like a Keras 3 TFSMLayer fed float16); its outputs, or None without a batch."""
    sample = samples.sample_batch(model, options)
    if sample is not None:
        return model(sample.value, training=False)
    return None


# ---------------------------------------------------------------------------------------------- the run


def collect(recorder, facts: Facts) -> None:
    """What the hooks recorded, with SavedModels read, restores matched and checkpoints range-audited."""
    from mpdoctor.trace.child.matching import match_checkpoint, match_restores

    facts.policy_events = recorder.policy_events
    facts.layers = recorder.layers
    facts.restores = recorder.restores
    facts.exports = recorder.exports
    facts.savedmodel_loads = recorder.savedmodel_loads
    facts.saved_paths = dict(recorder.asked)
    for load in recorder.savedmodel_loads:
        if load.handle and load.savedmodel is None:
            load.savedmodel = read_savedmodel(load.handle)
    resolved = match_restores(recorder.live_restores)
    manual = getattr(recorder, "manual_restores", None)  # hand-written restores (mpdoctor.trace.child.manual_restores)
    by_hand = manual.resolve() if manual is not None else {}
    resolved.update(by_hand)
    for path in recorder.extra_checkpoints:
        entry = Restore("--checkpoint", path)
        resolved[id(entry)] = match_checkpoint(entry, recorder)
        recorder.restores.append(entry)
    receivers = {id(entry): receiver for entry, receiver, _ in recorder.live_restores}
    audits.audit_restores(
        recorder.restores,
        audits.computes_in_float16(recorder.layer_objects),
        audits.Owners(recorder.layer_objects, resolved, receivers),
        manual.values(by_hand) if manual is not None else None,
    )
    for export in recorder.exports:
        written = export.written_to or export.path
        if written and export.error is None and os.path.isdir(written):
            export.savedmodel = read_savedmodel(written)
    if facts.environment is not None:
        facts.environment.global_policy = policy_now()


def read_savedmodel(handle: str) -> SavedModelInfo:
    try:
        from mpdoctor.artifacts.savedmodel import read_savedmodel as read

        return read(handle)
    except BaseException as exc:
        return SavedModelInfo(handle, error=SavedModelError("internal", f"{type(exc).__name__}: {exc}"))


# ---------------------------------------------------------------------------------------------- exceptions


def describe(exc: BaseException, phase: str, recorder) -> ExceptionRecord:
    message = str(exc)
    return ExceptionRecord(
        type(exc).__name__,
        message[:8000],
        phase,
        user_frame(exc, recorder),
        _failed_layer(message, recorder),
        "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-6000:],
    )


def user_frame(exc: BaseException, recorder) -> SourceRef | None:
    """The deepest traceback frame in the user's file."""
    if recorder is None or recorder.user_file is None:
        return None
    found = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        if os.path.realpath(frame.f_code.co_filename) == recorder.user_file:
            found = SourceRef(recorder.user_file, line)
    # Compiling the file failed (no frame of it ran): the line the compiler names, where its message points.
    if found is None and isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        found = (
            SourceRef(recorder.user_file, exc.lineno) if os.path.realpath(exc.filename) == recorder.user_file else None
        )
    return found


def _failed_layer(message: str, recorder) -> str | None:
    """Keras names the layer whose call raised: "Exception encountered when calling layer 'keras_layer'" (tf_keras)
    / "Exception encountered when calling KerasLayer.call()" or "...calling layer 'x' (type X)"."""
    if recorder is None:
        return None
    for pattern, attribute in (
        (r"calling layer ['\"]([^'\"]+)['\"]", "name"),
        (r"calling (\w+)\.call\(\)", "class_name"),
    ):
        match = re.search(pattern, message)
        if match:  # the most recently created layer with that name / class
            for uid, layer in reversed(list(recorder.layers.items())):
                if getattr(layer, attribute) == match.group(1):
                    return uid
    return None


# ---------------------------------------------------------------------------------------------- Jupyter


class _LiveRecorder:
    """What analyse_model needs of a recorder when no hook saw the model being built."""

    user_file = None

    def __init__(self, layers: dict[str, LayerRecord]) -> None:
        self.layers = layers


def live_facts(model, name: str, numerics_request: NumericsRequest | None) -> Facts:
    """The facts the trace child writes, for one live model object in this process (the Jupyter `%mpdoctor model`
    magic): graph, SavedModel signatures, environment, numerics. What no hook saw cannot be known: where layers were
    created, policy changes, restores; a layer whose policy differs from the global one counts as explicit."""
    facts = new_facts(environment=environment(), in_process=True)
    policy = policy_now()
    facts.layers = _layer_records(model, policy)
    record = analyse_model(name, LIVE_HOW, model, _LiveRecorder(facts.layers), facts, numerics_request)
    facts.models.append(record)
    for node in record.graph.nodes if record.graph else []:
        if node.savedmodel_handle:
            facts.savedmodel_loads.append(
                SavedModelLoad(
                    SAVEDMODEL_LAYER_APIS.get(node.class_name, node.class_name),
                    node.savedmodel_handle,
                    node.uid,
                    savedmodel=read_savedmodel(node.savedmodel_handle),
                )
            )
    facts.environment.global_policy = policy
    return facts


def _layer_records(model, global_policy: str | None) -> dict[str, LayerRecord]:
    """facts.layers for the model and every layer inside it, like the hooks record them at construction."""
    classes = model_classes()
    records = {}
    for layer in sublayers(model, recursive=True, include_self=True):
        policy, compute, variable = layer_policy(layer)
        records[str(id(layer))] = LayerRecord(
            class_name=type(layer).__name__,
            module=type(layer).__module__,
            name=getattr(layer, "name", None),
            flavour=flavour_of(layer),
            policy=policy,
            compute_dtype=compute,
            variable_dtype=variable,
            autocast=autocast_flag(layer),
            explicit_dtype=policy if policy and policy != global_policy else None,
            is_model=isinstance(layer, classes),
        )
    return records
