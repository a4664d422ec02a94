"""The ground truth of one training script (issue 30), run in a process of its own:

    python bench/_training_truth.py SCRIPT STEPS SPEC_JSON FOLDER POLICY:SEED[,POLICY:SEED...]

for each run, imports SCRIPT afresh (its `__main__` block does not run) with the random seed 0 (the same initial
weights in every run: checked), under its own policy (mixed) or with every global-policy call turned into float32
(float32, after the mixed run), then calls
the step the SPEC names (an expression in the script's namespace, e.g. `trainer.train_step`) on the script's own
batch (SPEC's `args`) until STEPS calls have moved the weights (a step that LossScaleOptimizer skips on an overflow
does not count, as fit's progress does not: the scale settles), the random seed reset to SEED first. It saves the
total update of the trainable variables of SPEC's `models` (float64, one vector) to FOLDER/POLICY-SEED.npy and
prints a JSON line: {"POLICY-SEED": {"calls", "applied", "float16_layers"} or {"error"}}.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

SEED_BEFORE_IMPORT = 0


def _force_float32() -> None:
    """Every global-policy setter of both Keras lines (each module that re-exports one) sets float32 instead, the
    script's own calls included."""
    import tensorflow as tf

    getattr(getattr(tf, "keras", None), "mixed_precision", None)  # loads tf.keras's lazily made modules
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(("keras", "tf_keras", "tensorflow")):
            continue
        for setter in ("set_global_policy", "set_dtype_policy"):
            original = getattr(module, setter, None)
            if callable(original):
                setattr(module, setter, lambda _policy, _original=original: _original("float32"))


def _seed(seed: int) -> None:
    import random

    import numpy as np
    import tensorflow as tf

    random.seed(seed)
    np.random.seed(seed)
    tf.random.set_seed(seed)
    for name in ("keras", "tf_keras"):
        module = sys.modules.get(name)
        setter = getattr(getattr(module, "utils", None), "set_random_seed", None)
        if setter is not None:
            setter(seed)


def _advance_seed_generators(models: list, times: int) -> None:
    """Keras 3's random layers seed their own generators when built (from the seed before the import): another seed
    for the steps moves those generators on instead."""
    for model in models:
        layers = model._flatten_layers() if hasattr(model, "_flatten_layers") else model.layers
        for layer in layers:
            generator = getattr(layer, "seed_generator", None)
            for _ in range(times if generator is not None and hasattr(generator, "next") else 0):
                generator.next()


def run(script: str, policy: str, seed: int, steps: int, spec: dict, out: str, index: int, start_of: list) -> dict:
    """One run: import the script afresh (as its own module) and train; `start_of` holds the first run's initial
    weights, which every later run must share."""
    import numpy as np

    if policy == "float32":
        _force_float32()
    _seed(SEED_BEFORE_IMPORT)
    loaded = importlib.util.spec_from_file_location(f"training_script_{index}", script)
    module = importlib.util.module_from_spec(loaded)
    sys.modules[loaded.name] = module
    try:
        loaded.loader.exec_module(module)
        namespace = vars(module)
        step = eval(spec["step"], namespace)  # the manifest's own expressions, over the kept set
        arguments = [eval(a, namespace) for a in spec["args"]]
        models = [eval(m, namespace) for m in spec["models"]]
    except Exception as exc:
        return {"error": f"import: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
    variables = list({id(v): v for m in models for v in m.trainable_variables}.values())
    float16 = sum(
        str(getattr(layer, "compute_dtype", "")) in ("float16", "bfloat16") for m in models for layer in m.layers
    )
    if policy == "float32" and float16:
        return {"error": "the float32 run still has float16 layers"}
    start = np.concatenate([np.asarray(v.numpy(), dtype="float64").ravel() for v in variables])
    if start_of and not np.array_equal(start_of[0], start):
        return {"error": "the initial weights differ from the first run's"}
    start_of.append(start)
    _seed(seed)
    _advance_seed_generators(models, seed)
    calls = applied = 0
    while applied < steps and calls < 3 * steps + 10:
        before = [v.numpy() for v in variables]
        try:
            step(*arguments)
        except Exception as exc:
            lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()] or [""]
            message = (lines[-1] if lines[0].startswith("in user code") else lines[0])[:200]  # a tf.function's
            return {"error": f"{type(exc).__name__}: {message}", "calls": calls}
        calls += 1
        applied += any(not np.array_equal(b, v.numpy()) for b, v in zip(before, variables, strict=True))
    now = np.concatenate([np.asarray(v.numpy(), dtype="float64").ravel() for v in variables])
    np.save(out, now - start)
    return {"calls": calls, "applied": applied, "float16_layers": int(float16)}


def main(script: str, steps: int, spec: dict, folder: str, runs: list[tuple[str, int]]) -> dict:
    """The runs in order (float32 ones after the mixed one: the float32 patch stays)."""
    if spec.get("keras") == 2:
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    start_of: list = []
    results = {}
    for index, (policy, seed) in enumerate(runs):
        out = os.path.join(folder, f"{policy}-{seed}.npy")
        results[f"{policy}-{seed}"] = run(script, policy, seed, steps, spec, out, index, start_of)
    return results


if __name__ == "__main__":
    script, steps, spec, folder, runs = sys.argv[1:6]
    wanted = [(policy, int(seed)) for policy, seed in (r.split(":") for r in runs.split(","))]
    print(json.dumps(main(script, int(steps), json.loads(spec), folder, wanted)))
