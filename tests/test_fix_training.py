"""Ground truth for loss-scaling fixes (issue 19): one training step of a fixed fixture, from the same weights as a
float32 reference step on the same batch, must move the weights the same way (cosine > 0.95, norm ratio within
0.5-2). And the rewrite mpdoctor does not make for a loop that clips before apply_gradients (what it wrote before
issue 19) really breaks that: its step moves the weights ~1e-4 times as far; Keras 3 fixes move the clip into the
optimizer instead (clipvalue, global_clipnorm, clipnorm), and their step trains like float32. One child per Keras
version runs all cases (TensorFlow starts once)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mpdoctor.fix.step import trains_like_float32

pytest.importorskip("tensorflow")

FIXES = Path(__file__).parent / "fixes"

# In the child: exec each variant (a complete fixture file, `__name__` not "__main__" so it only builds), give its
# model the reference's initial weights, run `train_step(x_batch, y_batch)` once and compare the weight updates.
STEP = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np

    import tensorflow as tf

    def run(text, env):
        os.environ.update(env)
        tf.keras.mixed_precision.set_global_policy("float32")  # no policy left over from the case before
        namespace = {"__name__": "fixture"}
        exec(compile(text, "fixture.py", "exec"), namespace)
        return namespace

    def update(namespace, start):
        # The first applied step: dynamic loss scaling skips a step whose scaled gradients overflow float16 and
        # halves the scale (tf_keras starts at 2**15 and skips the first step of this model), as it should.
        variables = namespace["model"].trainable_variables
        for _ in range(8):
            for variable, value in zip(variables, start):
                variable.assign(value)
            namespace["train_step"](namespace["x_batch"], namespace["y_batch"])
            delta = np.concatenate([(v.numpy() - s).ravel() for v, s in zip(variables, start)]).astype("float64")
            if np.any(delta):
                break
        return delta

    results = {}
    for name, case in json.loads(sys.argv[1]).items():
        reference = run(case["reference"], case.get("reference_env", {}))
        start = [v.numpy() for v in reference["model"].trainable_variables]
        expected = update(reference, start)
        try:
            got = update(run(case["candidate"], case.get("env", {})), start)
        except Exception as exc:
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
            continue
        cosine = float(got @ expected / (np.linalg.norm(got) * np.linalg.norm(expected)))
        results[name] = {"cosine": cosine, "ratio": float(np.linalg.norm(got) / np.linalg.norm(expected))}
    print("RESULTS " + json.dumps(results))
    """
)


CLIP_MOVES = ("clip_by_value", "clip_by_global_norm", "clip_by_norm")  # Keras 3: the clip moved into the optimizer


def _float32(text: str) -> str:
    return text.replace('"mixed_float16"', '"float32"')


def _steps(cases: dict, *, legacy: bool) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1" if legacy else "0")
    done = subprocess.run(
        [sys.executable, "-c", STEP, json.dumps(cases)], capture_output=True, text=True, env=env, timeout=600
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULTS ")), None)
    assert line is not None, done.stderr[-2000:]
    return json.loads(line[len("RESULTS ") :])


def _agrees(result: dict) -> bool:
    return "cosine" in result and trains_like_float32(result["cosine"], result["ratio"])


def _read(name: str) -> str:
    return (FIXES / name).read_text(encoding="utf-8")


def test_fixed_steps_train_like_float32_keras3():
    clipped = _read("MP501/clip_by_value_keras3.in.py")
    # What --fix --unsafe-fixes wrote for this loop before issue 19: wrap the optimizer, scale the loss.
    naive = clipped.replace(
        "optimizer = keras.optimizers.SGD(0.1)",
        "optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))",
    ).replace(
        "    grads = tape.gradient(loss, model.trainable_variables)",
        "        scaled_loss = optimizer.scale_loss(loss)\n"
        "    grads = tape.gradient(scaled_loss, model.trainable_variables)",
    )
    assert naive.count("scale_loss") == 1 and "LossScaleOptimizer(" in naive
    else_branch = _read("MP103/else_branch_keras3.out.py")
    results = _steps(
        {
            "else branch, float16 path": {
                "reference": else_branch,
                "reference_env": {"FP16": "0"},
                "candidate": else_branch,
                "env": {"FP16": "1"},
            },
            "else branch, float32 path": {
                "reference": _float32(else_branch),
                "reference_env": {"FP16": "0"},
                "candidate": else_branch,
                "env": {"FP16": "0"},
            },
            "clip by value, original": {"reference": _float32(clipped), "candidate": clipped},
            "clip by value, the refused rewrite": {"reference": _float32(clipped), "candidate": naive},
            # The rewrites that move the clip into the optimizer (clipvalue / global_clipnorm / clipnorm).
            **{
                f"{name}, fixed": {
                    "reference": _float32(_read(f"MP501/{name}_keras3.in.py")),
                    "candidate": _read(f"MP501/{name}_keras3.out.py"),
                }
                for name in CLIP_MOVES
            },
        },
        legacy=False,
    )
    print(results)  # the measured cosines and ratios (pytest -s)
    assert _agrees(results["else branch, float16 path"]), results
    assert _agrees(results["else branch, float32 path"]), results
    assert _agrees(results["clip by value, original"]), results
    refused = results["clip by value, the refused rewrite"]
    assert refused["ratio"] < 0.01, results  # training silently stops: why that rewrite is not made
    for name in CLIP_MOVES:
        assert _agrees(results[f"{name}, fixed"]), results


def test_fixed_steps_train_like_float32_tf_keras():
    clip_in, clip_out = (
        _read("MP501/clip_by_global_norm_keras2.in.py"),
        _read("MP501/clip_by_global_norm_keras2.out.py"),
    )
    else_in, else_out = _read("MP103/else_branch_keras2.in.py"), _read("MP103/else_branch_keras2.out.py")
    results = _steps(
        {
            "clip by global norm, original": {"reference": _float32(clip_in), "candidate": clip_in},
            "clip by global norm, fixed": {"reference": _float32(clip_in), "candidate": clip_out},
            "else branch, original float16 path": {
                "reference": else_in,
                "reference_env": {"FP16": "0"},
                "candidate": else_in,
                "env": {"FP16": "1"},
            },
            "else branch, fixed float16 path": {
                "reference": else_out,
                "reference_env": {"FP16": "0"},
                "candidate": else_out,
                "env": {"FP16": "1"},
            },
        },
        legacy=True,
    )
    print(results)  # the measured cosines and ratios (pytest -s)
    assert "error" in results["else branch, original float16 path"], results  # the removed experimental API
    for name in ("clip by global norm, original", "clip by global norm, fixed", "else branch, fixed float16 path"):
        assert _agrees(results[name]), results


def _before_issue_30(name: str) -> str:
    """What plain --fix wrote for these fixtures before issue 30."""
    text = _read(f"MP103/{name}")
    if name.startswith("hasattr_guard"):  # the call renamed, its guard left on the tf_keras name
        return text.replace("optimizer.get_scaled_loss(loss) if", "optimizer.scale_loss(loss) if")
    if name.startswith("split_clipped"):  # the scaling half rewritten, the unscaling half refused
        return text.replace("self.optimizer.get_scaled_loss(loss)", "self.optimizer.scale_loss(loss)")
    # the experimental Policy renamed (by hand, as the finding said) with its loss_scale kept
    return text.replace("experimental.Policy(", "Policy(").replace("experimental.set_policy", "set_global_policy")


def test_issue_30_fixes_train_like_float32_and_what_was_written_before_did_not_keras3():
    guard_out, pair_out = _read("MP103/hasattr_guard_keras3.out.py"), _read("MP103/split_pair_keras3.out.py")
    if_out = _read("MP103/hasattr_if_guard_keras3.out.py")
    policy_out = _read("MP103/policy_loss_scale_keras3.out.py")
    results = _steps(
        {
            "hasattr guard, original": {
                "reference": _float32(guard_out),
                "candidate": _read("MP103/hasattr_guard_keras3.in.py"),
            },
            "hasattr guard, before": {
                "reference": _float32(guard_out),
                "candidate": _before_issue_30("hasattr_guard_keras3.in.py"),
            },
            "hasattr guard, fixed": {"reference": _float32(guard_out), "candidate": guard_out},
            "hasattr if guard, fixed": {"reference": _float32(if_out), "candidate": if_out},
            "split pair, fixed": {"reference": _float32(pair_out), "candidate": pair_out},
            "split and clipped, before": {
                "reference": _float32(pair_out),
                "candidate": _before_issue_30("split_clipped_keras3.refused.py"),
            },
            "policy, original": {
                "reference": _float32(policy_out),
                "candidate": _read("MP103/policy_loss_scale_keras3.in.py"),
            },
            "policy, before": {
                "reference": _float32(policy_out),
                "candidate": _before_issue_30("policy_loss_scale_keras3.in.py"),
            },
            "policy, fixed": {"reference": _float32(policy_out), "candidate": policy_out},
        },
        legacy=False,
    )
    print(results)  # the measured cosines and ratios (pytest -s)
    for name in ("hasattr guard, original", "hasattr guard, before"):
        assert results[name]["ratio"] < 1e-3, results  # never scaled: the LossScaleOptimizer divides by 2**15
    assert "AttributeError" in results["split and clipped, before"]["error"], results
    assert "error" in results["policy, original"] and "error" in results["policy, before"], results
    for name in ("hasattr guard, fixed", "hasattr if guard, fixed", "split pair, fixed", "policy, fixed"):
        assert _agrees(results[name]), results


def _on_tf_keras(text: str) -> str:
    """A Keras 3 fixture spelled for tf_keras (`keras.X` -> `tf.keras.X`)."""
    return re.sub(r"(?<![\w.])keras\.", "tf.keras.", text.replace("import keras\n", ""))


def test_issue_30_fixes_train_like_float32_tf_keras():
    """The policy fix on tf_keras; and the hasattr shims as fixed for Keras 3 still train right on tf_keras (the
    guarded tf_keras arm runs there)."""
    original, fixed = _read("MP103/policy_loss_scale_keras2.in.py"), _read("MP103/policy_loss_scale_keras2.out.py")
    shims = {name: _on_tf_keras(_read(f"MP103/{name}_keras3.out.py")) for name in ("hasattr_guard", "hasattr_if_guard")}
    results = _steps(
        {
            **{f"{name}, fixed": {"reference": _float32(text), "candidate": text} for name, text in shims.items()},
            "policy, original": {"reference": _float32(fixed), "candidate": original},
            "policy, before": {
                "reference": _float32(fixed),
                "candidate": _before_issue_30("policy_loss_scale_keras2.in.py"),
            },
            "policy, fixed": {"reference": _float32(fixed), "candidate": fixed},
        },
        legacy=True,
    )
    print(results)
    assert "error" in results["policy, original"] and "error" in results["policy, before"], results
    for name in ("policy, fixed", "hasattr_guard, fixed", "hasattr_if_guard, fixed"):
        assert _agrees(results[name]), results


# In the child: exec an accumulation fixture, record what its step hands to apply_gradients (the gradients summed
# over the micro-batches) and the fraction of them that is exactly zero; the float32 run starts from the same weights.
ACCUMULATED = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tensorflow as tf

    class Recorder:
        def __init__(self, optimizer):
            self.optimizer, self.seen = optimizer, None

        def __getattr__(self, name):
            return getattr(self.optimizer, name)

        def apply_gradients(self, pairs):
            self.seen = np.concatenate([np.ravel(g.numpy()) for g, _ in pairs])

    def zero_fraction(text, start):
        tf.keras.mixed_precision.set_global_policy("float32")
        namespace = {"__name__": "fixture"}
        exec(compile(text, "fixture.py", "exec"), namespace)
        variables = namespace["model"].trainable_variables
        for variable, value in zip(variables, start or [v.numpy() for v in variables]):
            variable.assign(value)
        recorder = namespace["optimizer"] = Recorder(namespace["optimizer"])
        namespace["train_step"](namespace["x_batch"], namespace["y_batch"])
        return float(np.mean(recorder.seen == 0)), [v.numpy() for v in variables]

    results = {}
    for name, (text, reference) in json.loads(sys.argv[1]).items():
        _, start = zero_fraction(reference, None)
        results[name] = {"float32": zero_fraction(reference, start)[0], "policy": zero_fraction(text, start)[0]}
    print("RESULTS " + json.dumps(results))
    """
)


def _accumulated(cases: dict, *, legacy: bool) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1" if legacy else "0")
    done = subprocess.run(
        [sys.executable, "-c", ACCUMULATED, json.dumps(cases)], capture_output=True, text=True, env=env, timeout=600
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULTS ")), None)
    assert line is not None, done.stderr[-2000:]
    return json.loads(line[len("RESULTS ") :])


FIXTURES = Path(__file__).parent / "fixtures" / "MP501"


@pytest.mark.parametrize("legacy", [True, False], ids=["tf_keras", "keras3"])
def test_accumulated_float16_gradients_underflow_without_loss_scaling(legacy):
    """Ground truth for MP501 on gradient-accumulation loops (issue 30): the fixtures MP501 reports
    (accumulation_no_scaling_*) hand apply_gradients accumulated gradients most of which flushed to zero in float16
    (none in float32); with tf_keras loss scaling (accumulation_scaled_keras2, not reported) they do not flush, and
    neither does bfloat16 (accumulation_bfloat16_keras3, not reported)."""
    keras = "keras2" if legacy else "keras3"
    reported = (FIXTURES / f"accumulation_no_scaling_{keras}.py").read_text(encoding="utf-8")
    cases = {"no loss scaling": [reported, _float32(reported)]}
    quiet = "accumulation_scaled_keras2.py" if legacy else "accumulation_bfloat16_keras3.py"
    text = (FIXTURES / quiet).read_text(encoding="utf-8")
    cases["not reported"] = [
        text,
        text.replace('"mixed_float16"', '"float32"').replace('"mixed_bfloat16"', '"float32"'),
    ]
    results = _accumulated(cases, legacy=legacy)
    print(results)
    assert results["no loss scaling"]["float32"] == 0 and results["no loss scaling"]["policy"] > 0.5, results
    assert results["not reported"]["float32"] == 0 and results["not reported"]["policy"] < 0.05, results
