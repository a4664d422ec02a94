"""The trace child: `python -m mpdoctor.trace.child REQUEST.json RESULT.json`.

Imports TensorFlow, installs the hooks, imports the user's file as a module (never as `__main__`, so a training
block under `if __name__ == "__main__":` does not run), finds its models, builds and calls them once, and writes
the facts (mpdoctor/trace schema, version 1) to RESULT.json. Whatever happens, it tries to write what it recorded.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import inspect
import json
import os
import re
import sys
import traceback

FACTS_VERSION = 1
BUILDER_NAMES = ("build_model", "create_model", "get_model", "make_model")
_BUILDER_LIKE = re.compile(r"^_?(?:(?:build|create|make|get|define|construct)(?:_\w+)?|\w*model\w*|\w+_(?:net|network|"
                           r"classifier|encoder|decoder|backbone|cnn|mlp))$", re.IGNORECASE)
_NOT_A_BUILDER = re.compile(r"data|loader|optimi[sz]er|loss|metric|callback|train|fit|eval|predict|input|generator|"
                            r"pipeline|config|arg|pars|path|save|load|export|test|plot|summary|step|batch",
                            re.IGNORECASE)


def main(argv: list[str]) -> int:
    request_path, result_path = argv
    with open(request_path, encoding="utf-8") as handle:
        request = json.load(handle)
    facts = {"version": FACTS_VERSION, "status": "ok", "environment": {}, "policy_events": [], "layers": {},
             "savedmodel_loads": [], "restores": [], "exports": [], "models": [], "exception": None}
    recorder = None
    try:
        recorder = _prepare(request, facts)
        recorder.extra_checkpoints = request.get("checkpoints") or []
        if request.get("notebook"):
            _notebook_builtins()
        module = _import_user_file(request["file"], facts, recorder, request.get("source_file"))
        facts["layers_created_on_import"] = len(recorder.layers)
        models = _discover(module, request.get("entry"), recorder, facts)
        for name, how, model in models:
            facts["models"].append(_analyse_model(name, how, model, recorder, facts, request))
            recorder.analysed_models.append(model)
    except BaseException as exc:  # noqa: BLE001 - the child must report, never die silently
        if facts["exception"] is None:
            facts["exception"] = _describe(exc, "internal", recorder)
            facts["status"] = "exception"
    finally:
        if recorder is not None:
            _collect(recorder, facts)
        _write(result_path, facts)
    return 0


def _flavours(source: str) -> set[str]:
    flavours = {"keras"}
    if os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes") or "tf_keras" in source:
        flavours.add("tf_keras")
    if os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes") and "import keras" not in source:
        flavours.discard("keras")
    if "tensorflow_hub" in source:
        flavours.add("hub")
    return flavours


def _prepare(request: dict, facts: dict):
    from mpdoctor.trace import hooks

    source = open(request.get("source_file") or request["file"], encoding="utf-8", errors="replace").read()
    if "TF_USE_LEGACY_KERAS" in source and ("'1'" in source or '"1"' in source):
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # the file asks for it before importing TF
    import tensorflow as tf

    recorder = hooks.Recorder(request["file"], request.get("scratch"))
    hooks.install(recorder, _flavours(source))
    facts["environment"] = _environment(tf)
    return recorder


def _environment(tf) -> dict:
    from importlib import metadata

    def version(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    legacy = os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes")
    gpus = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        gpus.append({"name": details.get("device_name", device.name),
                     "compute_capability": list(details["compute_capability"])
                     if details.get("compute_capability") else None})
    return {"cpu_bf16": _cpu_has_bf16(), "tensorflow": tf.__version__, "keras": version("keras"), "tf_keras": version("tf-keras"),
            "hub": version("tensorflow-hub"), "legacy_keras": legacy, "keras_major": 2 if legacy else 3,
            "gpus": gpus, "global_policy": None}


def _cpu_has_bf16() -> bool:
    """x86 CPUs with AVX512-BF16 or AMX compute bfloat16 natively (oneDNN uses them)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            flags = handle.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _notebook_builtins() -> None:
    """What IPython provides to every cell and notebooks use freely: `display` (a no-op here)."""
    import builtins

    if not hasattr(builtins, "display"):
        builtins.display = lambda *objects, **kwargs: None


class _SourceAsFileLoader(importlib.machinery.SourceFileLoader):
    """Loads `path` but reads its text from another file: the module's `__file__`, code filename and directory on
    sys.path are the original's, so paths computed from `__file__` and tracebacks still point at the user's file."""

    def __init__(self, fullname: str, path: str, source: str) -> None:
        super().__init__(fullname, path)
        self.source = source

    def get_data(self, path: str) -> bytes:
        with open(self.source, "rb") as handle:
            return handle.read()

    def path_stats(self, path: str):
        raise OSError("never cache bytecode of a candidate fix")


def _import_user_file(path: str, facts: dict, recorder, source_file: str | None = None):
    """`source_file`: read the module's text from there (a candidate fix, a notebook's cells), the module being
    `path` all the same."""
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.insert(0, directory)
    loader = _SourceAsFileLoader("__mpdoctor_model__", path, source_file) if source_file else None
    spec = importlib.util.spec_from_file_location("__mpdoctor_model__", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:
        facts["exception"] = {"type": "SystemExit", "message": f"the file called sys.exit({exc.code!r}) on import",
                              "phase": "import", "location": _user_frame(exc, recorder), "layer_uid": None}
        facts["status"] = "exception"
    except BaseException as exc:  # noqa: BLE001
        facts["exception"] = _describe(exc, "import", recorder)
        facts["status"] = "exception"
    return module


def _model_classes() -> tuple[type, ...]:
    classes = []
    if "keras" in sys.modules:
        from keras.src.models.model import Model

        classes.append(Model)
    if "tf_keras" in sys.modules:
        from tf_keras.src.engine.training import Model as Model2

        classes.append(Model2)
    return tuple(classes)


def _discover(module, entry: str | None, recorder, facts: dict) -> list[tuple[str, str, object]]:
    """(name, how found, model): --entry; else zero-argument builders; else module-level models; else every
    top-level model created during import."""
    model_classes = _model_classes()
    found: list[tuple[str, str, object]] = []

    def add(value, name, how):
        if isinstance(value, model_classes):
            if all(value is not m for _, _, m in found):
                found.append((name, how, value))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                add(item, f"{name}[{i}]", how)
        elif isinstance(value, dict):
            for key, item in value.items():
                add(item, f"{name}[{key!r}]", how)

    def call(name):
        target = getattr(module, name, None)
        if target is None:
            raise LookupError(f"--entry {name}: the file defines no such name")
        if not callable(target) or isinstance(target, model_classes):
            add(target, name, f"module attribute `{name}`")
            return
        try:
            value = target()
        except BaseException as exc:  # noqa: BLE001
            if facts["exception"] is None:
                facts["exception"] = _describe(exc, "build", recorder)
                facts["status"] = "exception"
            return
        add(value, value.name if hasattr(value, "name") else name, f"{name}()")

    if entry:
        call(entry)
        return found
    if facts["exception"] is None:
        for name in _builder_names(module):
            call(name)
        if found:
            return found
        for name, value in list(vars(module).items()):
            if not name.startswith("__"):
                add(value, name, f"module attribute `{name}`")
        if found:
            return _drop_contained(found)
    nested = _nested_model_ids(recorder.models)
    for model in recorder.models:
        if id(model) not in nested:
            where = recorder.layers.get(str(id(model)), {}).get("created_at") or {}
            add(model, getattr(model, "name", "model"), f"created at line {where.get('line', '?')}")
    return found


def _builder_names(module) -> list[str]:
    """The conventional builder names if the file defines one; else its own zero-argument functions whose name says
    they build a model (`build`, `create_classifier`, `get_unet`, `transformer_model`), never ones that say they
    load data, train or evaluate."""
    conventional = [name for name in BUILDER_NAMES
                    if callable(getattr(module, name, None)) and _zero_argument(getattr(module, name))]
    if conventional:
        return conventional
    return [name for name, target in vars(module).items()
            if _BUILDER_LIKE.match(name) and not _NOT_A_BUILDER.search(name) and inspect.isfunction(target)
            and target.__module__ == module.__name__ and _zero_argument(target)]


def _drop_contained(found: list) -> list:
    """A model whose layers all belong to another found model (a backbone whose output feeds a new head) is
    analysed as part of that model, not on its own: its float16 output is an inner tensor there."""
    layer_sets = [{id(layer) for layer in _sublayers(model)} for _, _, model in found]
    kept = []
    for i, entry in enumerate(found):
        inner = layer_sets[i]
        if inner and any(j != i and inner < other for j, other in enumerate(layer_sets)):
            continue
        kept.append(entry)
    return kept


def _zero_argument(fn) -> bool:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in signature.parameters.values())


def _nested_model_ids(models) -> set[int]:
    nested: set[int] = set()
    for model in models:
        for layer in _sublayers(model):
            if layer is not model:
                nested.add(id(layer))
        inner = getattr(model, "_functional", None)  # the Functional a Keras 3 Sequential builds to run itself
        if inner is not None and inner is not model:
            nested.add(id(inner))
    return nested


def _sublayers(model):
    try:
        return list(model._flatten_layers(include_self=False, recursive=True))
    except Exception:
        return list(getattr(model, "layers", []))


def _analyse_model(name: str, how: str, model, recorder, facts: dict, request: dict) -> dict:
    from mpdoctor.trace import graph as graph_module
    from mpdoctor.trace import numerics

    record = {"name": name, "how": how, "location": recorder.layers.get(str(id(model)), {}).get("created_at"),
              "compiled": bool(getattr(model, "compiled", False) or getattr(model, "_is_compiled", False)),
              "graph": None, "error": None}
    options = numerics.options_from_request(request)
    try:
        session = numerics.Session(model, options, recorder.user_file)
    except BaseException as exc:  # noqa: BLE001 - numerics are extra facts: never lose the others
        session = None
        record["numerics"] = numerics.failed(options, exc)
    try:
        if session is not None and session.ready:
            session.call()  # the one call on a sample batch, instrumented for the float16 statistics
        else:
            _call_once(model)
    except BaseException as exc:  # noqa: BLE001 - a model that cannot run is a finding, not a crash
        record["error"] = _describe(exc, "call", recorder)
        if facts["exception"] is None:
            facts["exception"] = record["error"]
            facts["status"] = "exception"
    try:
        record["graph"] = graph_module.model_graph(model, recorder.layers)
    except BaseException as exc:  # noqa: BLE001
        record["graph_error"] = f"{type(exc).__name__}: {exc}"
    if session is not None:
        try:
            record["numerics"] = session.finish(record["graph"])
        except BaseException as exc:  # noqa: BLE001
            record["numerics"] = numerics.failed(options, exc)
    return record


def _call_once(model) -> None:
    """Run the model on a small deterministic batch built from its input specs (catches failures that only
    happen when the model runs, like a Keras 3 TFSMLayer fed float16)."""
    from mpdoctor.trace.numerics import sample_inputs

    batch = sample_inputs(model)
    if batch is not None:
        model(batch, training=False)


def _collect(recorder, facts: dict) -> None:
    facts["policy_events"] = recorder.policy_events
    facts["layers"] = recorder.layers
    facts["restores"] = recorder.restores
    facts["exports"] = recorder.exports
    facts["savedmodel_loads"] = recorder.savedmodel_loads
    for load in recorder.savedmodel_loads:
        if load.get("handle") and load.get("savedmodel") is None:
            load["savedmodel"] = _read_savedmodel(load["handle"])
    from mpdoctor.trace.matching import match_checkpoint, match_restores

    match_restores(recorder.live_restores)
    for path in recorder.extra_checkpoints:
        entry = {"api": "--checkpoint", "path": path, "location": None, "error": None}
        match_checkpoint(entry, recorder)
        recorder.restores.append(entry)
    _audit_restores(recorder.restores, policy_now())
    for export in recorder.exports:
        written = export.get("written_to") or export.get("path")
        if written and export.get("error") is None and os.path.isdir(written):
            export["savedmodel"] = _read_savedmodel(written)
    facts["environment"]["global_policy"] = policy_now()


def policy_now() -> str | None:
    from mpdoctor.trace.hooks import dtype_name

    policy = None
    for name in ("keras", "tf_keras"):
        module = sys.modules.get(name)
        if module is not None:
            try:
                policy = dtype_name(module.mixed_precision.global_policy())
            except Exception:  # noqa: BLE001
                pass
    return policy


def _audit_restores(restores: list[dict], policy: str | None) -> None:
    """Range-audit every checkpoint that was (or, with --checkpoint, would be) restored into a model computing in
    float16: values beyond float16's range become inf when the weights are cast for compute (MP302/MP303)."""
    from mpdoctor.static.policies import compute_dtype

    target = compute_dtype(policy)
    if target != "float16":
        return
    from mpdoctor.artifacts.checkpoints import audit_checkpoint

    for restore in restores:
        if restore.get("error") or not restore.get("path") or "audit" in restore:
            continue
        try:
            restore["audit"] = audit_checkpoint(restore["path"], target)
        except BaseException as exc:  # noqa: BLE001 - an unreadable checkpoint is reported, not fatal
            restore["audit_error"] = f"{type(exc).__name__}: {exc}"


def _read_savedmodel(handle: str) -> dict:
    try:
        from mpdoctor.artifacts.savedmodel import read_savedmodel

        return read_savedmodel(handle)
    except BaseException as exc:  # noqa: BLE001
        return {"handle": handle, "path": None, "signatures": [], "functions": [], "accepted_input_dtypes": [],
                "error": {"kind": "internal", "message": f"{type(exc).__name__}: {exc}"}}


def _describe(exc: BaseException, phase: str, recorder) -> dict:
    message = str(exc)
    return {"type": type(exc).__name__, "message": message[:8000], "phase": phase,
            "location": _user_frame(exc, recorder), "layer_uid": _failed_layer(message, recorder),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-6000:]}


def _user_frame(exc: BaseException, recorder) -> dict | None:
    """The deepest traceback frame in the user's file."""
    if recorder is None:
        return None
    found = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        if os.path.realpath(frame.f_code.co_filename) == recorder.user_file:
            found = {"file": recorder.user_file, "line": line}
    return found


def _failed_layer(message: str, recorder) -> str | None:
    """Keras names the layer whose call raised: "Exception encountered when calling layer 'keras_layer'" (tf_keras)
    / "Exception encountered when calling KerasLayer.call()" or "...calling layer 'x' (type X)"."""
    import re

    if recorder is None:
        return None
    for pattern, field in ((r"calling layer ['\"]([^'\"]+)['\"]", "name"), (r"calling (\w+)\.call\(\)", "class")):
        match = re.search(pattern, message)
        if match:  # the most recently created layer with that name / class
            for uid, layer in reversed(list(recorder.layers.items())):
                if layer.get(field) == match.group(1):
                    return uid
    return None


def _write(path: str, facts: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(facts, handle, default=str)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
